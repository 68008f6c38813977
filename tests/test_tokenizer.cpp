// Tokenizers (runner/tokenize): ids equal to the reference implementations' for every fixture
// text (tests/tokenizer_fixtures: GPT-2, Llama 3 and Qwen 2 tokenizer.json against
// transformers.js's tokenizers, a SentencePiece model against python3-sentencepiece), decode
// round trips, vocabulary sizes and end-of-document ids, and every refusal naming the file
// and the field.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/json_reader.hpp"
#include "process_helpers.hpp"
#include "runner/tokenize/tokenizer.hpp"
#include "runner/tokenize/unicode.hpp"
#include "scratch_dir.hpp"

namespace {

using axonn::load_tokenizer;
using axonn::Tokenizer;
using axonn::TokenizerError;

const std::string kFixtures = axonn::test::kSourceDir + "/tests/tokenizer_fixtures/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<int32_t> ids_of(const axonn::JsonValue& list) {
  std::vector<int32_t> ids;
  for (const axonn::JsonValue& v : list.array()) ids.push_back(static_cast<int32_t>(v.integer()));
  return ids;
}

// The fixture texts with printable escapes, for failure messages.
std::string shown(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, 80)) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out.append(hex);
    }
  }
  return out;
}

const axonn::JsonValue& bpe_cases() {
  static const axonn::JsonValue cases = axonn::parse_json(read_file(kFixtures + "bpe_cases.json"));
  return cases;
}

// Each published tokenizer once per test binary: Llama 3's takes a second to load.
const Tokenizer& published(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[name];
  if (!t) t = load_tokenizer(kFixtures + name + ".tokenizer.json");
  return *t;
}

// The text a tokenizer that normalizes to NFC decodes to: its added tokens are matched in the
// raw text first (their `normalized` is false, as Qwen's are) and only the text between them is
// normalized, so "<|im_start|>" + U+0338 keeps its '>' where NFC of the whole would fold the
// two into U+226F. The longest token that starts at a position is the match.
std::string nfc_between_added_tokens(const std::string& text, const std::vector<std::string>& added) {
  std::string out;
  size_t piece_start = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    for (const std::string& token : added) {
      if (token.size() > len && text.compare(i, token.size(), token) == 0) len = token.size();
    }
    if (len == 0) {
      ++i;
      continue;
    }
    out.append(axonn::tokenize::nfc(text.substr(piece_start, i - piece_start))).append(text, i, len);
    i += len;
    piece_start = i;
  }
  return out.append(axonn::tokenize::nfc(text.substr(piece_start)));
}

void expect_reference_ids(const std::string& name) {
  const Tokenizer& t = published(name);
  const auto& texts = bpe_cases().at("texts").array();
  const auto& expected = bpe_cases().at(name).array();
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GE(texts.size(), 50u);
  const axonn::JsonValue tokenizer_json = axonn::parse_json(read_file(kFixtures + name + ".tokenizer.json"));
  std::vector<std::string> added;
  for (const axonn::JsonValue& token : tokenizer_json.at("added_tokens").array()) {
    added.push_back(token.at("content").string());
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& text = texts[i].string();
    const std::vector<int32_t> ids = t.encode(text);
    EXPECT_EQ(ids, ids_of(expected[i])) << name << " text " << i << ": " << shown(text);
    // Qwen 2 normalizes to NFC: decode gives the normalized text back.
    const std::string normalized = name == "qwen2" ? nfc_between_added_tokens(text, added) : text;
    EXPECT_EQ(t.decode(ids), normalized) << name << " text " << i << ": " << shown(text);
  }
}

TEST(Tokenizer, Gpt2IdsEqualTheReference) { expect_reference_ids("gpt2"); }
TEST(Tokenizer, Llama3IdsEqualTheReference) { expect_reference_ids("llama3"); }
TEST(Tokenizer, Qwen2IdsEqualTheReference) { expect_reference_ids("qwen2"); }

// encode is const and shared: four threads encoding all texts at once (one merge cache,
// thread-local merge buffers) get the reference's ids, as one thread does.
TEST(Tokenizer, ThreadsShareOneTokenizer) {
  const Tokenizer& t = published("llama3");
  const auto& texts = bpe_cases().at("texts").array();
  const auto& expected = bpe_cases().at("llama3").array();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < mismatches.size(); ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = k; i < texts.size() + k; ++i) {
          const size_t j = i % texts.size();
          if (t.encode(texts[j].string()) != ids_of(expected[j])) ++mismatches[k];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(Tokenizer, VocabularySizesAndEndOfDocument) {
  EXPECT_EQ(published("gpt2").vocab_size(), 50257);
  EXPECT_EQ(published("gpt2").end_of_document(), 50256);
  EXPECT_EQ(published("llama3").vocab_size(), 128256);
  EXPECT_EQ(published("llama3").end_of_document(), 128001);
  EXPECT_EQ(published("qwen2").vocab_size(), 151669);
  EXPECT_EQ(published("qwen2").end_of_document(), 151643);
  EXPECT_EQ(published("gpt2").description(), "tokenizer.json: byte-level BPE, 50257 ids, GPT-2 pre-tokenizer");
  EXPECT_EQ(published("llama3").description(),
            "tokenizer.json: byte-level BPE, 128256 ids, Llama 3 pre-tokenizer, ignore_merges");
  EXPECT_EQ(published("qwen2").description(), "tokenizer.json: byte-level BPE, 151669 ids, Qwen 2 pre-tokenizer, NFC");
}

TEST(Tokenizer, SpecialTokensInTextBecomeTheirIds) {
  EXPECT_EQ(published("llama3").encode("<|begin_of_text|>"), std::vector<int32_t>{128000});
  EXPECT_EQ(published("gpt2").encode("a<|endoftext|>"), (std::vector<int32_t>{64, 50256}));
  // A prefix of a special token is ordinary text.
  EXPECT_GT(published("qwen2").encode("<|im_start").size(), 1u);
}

// Invalid UTF-8 cannot reach the reference (its input is a string); here each invalid byte
// is a code point of its own that is no letter, number or space, and the bytes round trip.
TEST(Tokenizer, InvalidUtf8IsKeptByteForByte) {
  const std::vector<std::string> inputs = {"a\xff" "b", "\xc3", "caf\xc3", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80",
                                           "\xc0\xaf overlong", std::string("nul\0byte", 8), " \xfe\xfe\n\xff"};
  for (const char* name : {"gpt2", "llama3", "qwen2"}) {
    for (const std::string& text : inputs) {
      EXPECT_EQ(published(name).decode(published(name).encode(text)), text) << name << ": " << shown(text);
    }
  }
  // GPT-2: "a", "\xff", "b" are three pre-tokens (the byte is `other`, between two letters).
  const Tokenizer& gpt2 = published("gpt2");
  const std::vector<int32_t> a = gpt2.encode("a"), ff = gpt2.encode("\xff"), b = gpt2.encode("b");
  ASSERT_EQ(ff.size(), 1u);
  EXPECT_EQ(gpt2.encode("a\xff" "b"), (std::vector<int32_t>{a[0], ff[0], b[0]}));
}

TEST(Tokenizer, LongInputsEncodeAndRoundTrip) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text.append("word").append(std::to_string(i)).append(i % 7 == 0 ? "\n\t" : " ");
  text.append(std::string(100000, 'x')).append(std::string(5000, ' ')).append("\xf0\x9f\x98\x80");
  for (const char* name : {"gpt2", "llama3", "qwen2"}) {
    EXPECT_EQ(published(name).decode(published(name).encode(text)), text) << name;
  }
}

TEST(Tokenizer, Nfc) {
  using axonn::tokenize::nfc;
  EXPECT_EQ(nfc("e\xcc\x81"), "\xc3\xa9");                    // e + combining acute -> é
  EXPECT_EQ(nfc("\xc3\xa9"), "\xc3\xa9");                     // already composed
  EXPECT_EQ(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"), "\xea\xb0\x81");  // Hangul L V T -> 각
  EXPECT_EQ(nfc("a\xcc\xa3\xcc\x87"), "\xe1\xba\xa1\xcc\x87");  // a + dot below + dot above -> ạ + dot above
  EXPECT_EQ(nfc("a\xcc\x87\xcc\xa3"), "\xe1\xba\xa1\xcc\x87");  // canonical order first
  EXPECT_EQ(nfc("\xe2\x84\xab"), "\xc3\x85");                 // Angstrom sign (singleton) -> Å
  EXPECT_EQ(nfc("\xff\xcc\x81"), "\xff\xcc\x81");             // an invalid byte composes with nothing
}

TEST(Tokenizer, SentencePieceIdsEqualTheReference) {
  const axonn::JsonValue cases = axonn::parse_json(read_file(kFixtures + "sentencepiece_cases.json"));
  const auto t = load_tokenizer(kFixtures + "sentencepiece.model");
  EXPECT_EQ(t->vocab_size(), cases.at("vocab_size").integer());
  EXPECT_EQ(t->end_of_document(), static_cast<int32_t>(cases.at("eos").integer()));
  EXPECT_EQ(t->description(), "SentencePiece model, 1000 ids");
  const auto& texts = cases.at("texts").array();
  ASSERT_GE(texts.size(), 50u);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& text = texts[i].string();
    const std::vector<int32_t> ids = t->encode(text);
    EXPECT_EQ(ids, ids_of(cases.at("ids").at(i))) << "text " << i << ": " << shown(text);
    if (cases.at("round_trip").at(i).boolean()) {
      EXPECT_EQ(t->decode(ids), text) << "text " << i;
    }
  }
  EXPECT_THROW(t->decode(std::vector<int32_t>{1000}), TokenizerError);
}

TEST(Tokenizer, ByteTokenizerIsOneIdPerByte) {
  const axonn::ByteTokenizer t;
  const std::string text("a\xff\0z", 4);
  EXPECT_EQ(t.encode(text), (std::vector<int32_t>{97, 255, 0, 122}));
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_FALSE(t.end_of_document().has_value());
  EXPECT_THROW(t.decode(std::vector<int32_t>{256}), TokenizerError);
}

TEST(Tokenizer, DecodeRefusesAnUnknownId) {
  try {
    published("gpt2").decode(std::vector<int32_t>{50257});
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("50257"), std::string::npos) << e.what();
  }
}

// A refusal: TokenizerError with exit code 2 whose message names the file and each of `parts`.
class TokenizerRefusal : public axonn::test::ScratchDirTest {
 protected:
  void expect_refused(const std::string& path, const std::vector<std::string>& parts) {
    try {
      load_tokenizer(path);
      ADD_FAILURE() << path << " loaded";
    } catch (const TokenizerError& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(m.find(path), std::string::npos) << m;
      for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  // gpt2.tokenizer.json with `from` replaced by `to` (which must occur).
  std::string gpt2_with(const std::string& from, const std::string& to, const std::string& name = "tokenizer.json") {
    static const std::string original = read_file(kFixtures + "gpt2.tokenizer.json");
    std::string text = original;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return write(name, text);
  }
  std::string llama3_with(const std::string& from, const std::string& to) {
    std::string text = read_file(kFixtures + "llama3.tokenizer.json");
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return write("tokenizer.json", text);
  }
};

TEST_F(TokenizerRefusal, UnsupportedModelTypes) {
  expect_refused(gpt2_with("\"type\":\"BPE\"", "\"type\":\"WordPiece\""), {"model.type", "\"WordPiece\"", "BPE"});
  expect_refused(gpt2_with("\"type\":\"BPE\"", "\"type\":\"Unigram\""), {"model.type", "\"Unigram\""});
  expect_refused(gpt2_with("\"byte_fallback\":false", "\"byte_fallback\":true"), {"model.byte_fallback", "true", "give axonn the tokenizer.model"});
  expect_refused(gpt2_with("\"unk_token\":null", "\"unk_token\":\"<unk>\""), {"model.unk_token", "\"<unk>\""});
}

TEST_F(TokenizerRefusal, UnsupportedNormalizersAndPreTokenizers) {
  expect_refused(gpt2_with("\"normalizer\":null", "\"normalizer\":{\"type\":\"NFKC\"}"), {"normalizer.type", "\"NFKC\"", "NFC"});
  expect_refused(gpt2_with("\"pre_tokenizer\":{\"type\":\"ByteLevel\"", "\"pre_tokenizer\":{\"type\":\"Metaspace\""),
                 {"pre_tokenizer.type", "\"Metaspace\"", "give axonn the tokenizer.model"});
  expect_refused(gpt2_with("\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true}",
                           "\"pre_tokenizer\":null"),
                 {"pre_tokenizer", "null"});
  expect_refused(gpt2_with("\"decoder\":{\"type\":\"ByteLevel\"", "\"decoder\":{\"type\":\"WordPiece\""), {"decoder.type", "\"WordPiece\""});
  // One character changed in Llama 3's pattern: \p{N}{1,3} -> \p{N}{1,4}.
  expect_refused(llama3_with("\\\\p{N}{1,3}", "\\\\p{N}{1,4}"),
                 {"pre_tokenizer.pretokenizers[0].pattern.Regex", "|\\p{N}{1,4}|", "GPT-2, Llama 3 and Qwen 2"});
  expect_refused(llama3_with("\"behavior\":\"Isolated\"", "\"behavior\":\"Removed\""),
                 {"pre_tokenizer.pretokenizers[0].behavior", "\"Removed\""});
  expect_refused(llama3_with("\"invert\":false", "\"invert\":true"), {"pre_tokenizer.pretokenizers[0].invert"});
  // Found by fuzz_tokenizer_json: use_regex absent means true, which a Split cannot precede.
  expect_refused(llama3_with(",\"use_regex\":false", ""), {"pre_tokenizer.pretokenizers[1].use_regex", "absent (default true)"});
}

TEST_F(TokenizerRefusal, UnsupportedAddedTokenFlags) {
  expect_refused(gpt2_with("\"lstrip\":false", "\"lstrip\":true"), {"added_tokens[0].lstrip", "true"});
  expect_refused(gpt2_with("\"single_word\":false", "\"single_word\":true"), {"added_tokens[0].single_word"});
}

TEST_F(TokenizerRefusal, MalformedFiles) {
  expect_refused(write("broken.json", "{\"model\": {\"type\": \"BPE\", "), {"not valid JSON"});
  expect_refused(gpt2_with("\"merges\":[\"", "\"merges\":[\"nothere t\",\""), {"model.merges[0]", "\"nothere\"", "not in model.vocab"});
  expect_refused(gpt2_with("\"merges\":[\"", "\"merges\":[\"a b c\",\""), {"model.merges[0]", "one space"});
  expect_refused(gpt2_with("\"vocab\":{", "\"vocab\":{\"zzqq\":0,"), {"model.vocab", "id 0", "unique"});
  expect_refused(gpt2_with("\"id\":50256", "\"id\":7"), {"added_tokens[0].id", "unique"});
  expect_refused(gpt2_with("\"vocab\":{", "\"vocab\":{\"\xe2\x82\xac\":60000,"), {"model.vocab", "byte-level alphabet"});
  expect_refused(gpt2_with("\"vocab\":{", "\"vocab\":{\"zzqx\":-1,"), {"model.vocab[\"zzqx\"]", "-1"});
  // Found by fuzz_tokenizer_json: an id beyond int64 was cast before its range was checked.
  expect_refused(gpt2_with("\"vocab\":{", "\"vocab\":{\"zzqy\":1e33,"), {"model.vocab[\"zzqy\"]", "is 1e+33", "integer"});
  expect_refused(gpt2_with("\"vocab\":{", "\"vocab\":{\"zzqy\":2.5,"), {"model.vocab[\"zzqy\"]", "2.5"});
  // Found by fuzz_tokenizer_json: one id of two billion sized the id table at 64 GB.
  expect_refused(gpt2_with("\"id\":50256", "\"id\":2000000000"), {"added_tokens[0].id", "2000000000", "16777215"});
  expect_refused(write("empty.json", "{}"), {"model", "missing"});
  expect_refused(path("no-such-tokenizer.json"), {"cannot open"});
  expect_refused(write("tokenizer.model", "this is no SentencePiece model"), {"not a SentencePiece model"});
  expect_refused(write("vocab.txt", "hello\nworld\n"), {"neither a tokenizer.json"});
}

// Older tokenizer.json files have no model.type; a model with merges is BPE, as Hugging
// Face tokenizers' loader takes it.
TEST_F(TokenizerRefusal, AModelWithoutTypeButWithMergesIsBpe) {
  const auto t = load_tokenizer(gpt2_with("\"type\":\"BPE\",", ""));
  EXPECT_EQ(t->encode("Hello world"), published("gpt2").encode("Hello world"));
  expect_refused(write("untyped.json", "{\"model\": {\"vocab\": {}}}"), {"model.type", "no merges"});
}

// A model's folder: its tokenizer.json first, else its tokenizer.model.
TEST_F(TokenizerRefusal, AFolderMeansItsTokenizerFile) {
  expect_refused(dir_.string(), {"a folder without tokenizer.json or tokenizer.model"});
  std::filesystem::copy_file(kFixtures + "sentencepiece.model", path("tokenizer.model"));
  EXPECT_EQ(load_tokenizer(dir_.string())->description(), "SentencePiece model, 1000 ids");
  std::filesystem::copy_file(kFixtures + "gpt2.tokenizer.json", path("tokenizer.json"));
  EXPECT_EQ(load_tokenizer(dir_.string())->vocab_size(), 50257);
}

}  // namespace
