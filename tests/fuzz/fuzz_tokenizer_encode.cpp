// libFuzzer target for the byte-level BPE encoder itself: arbitrary bytes (any UTF-8, invalid
// sequences, NULs, megabyte whitespace runs) encoded by two small fixed tokenizers, one with
// GPT-2's pre-tokenizer and one with Llama 3's split pattern, NFC and ignore_merges.
//
// Beyond ASan and UBSan and libFuzzer's timeout (the encoder must never loop): encode never
// throws, every id is below vocab_size, and decode gives the input back bytes for bytes (for
// the NFC tokenizer: the text between added tokens in NFC, the tokens as they were).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_checks.hpp"
#include "runner/tokenize/bpe_model.hpp"
#include "runner/tokenize/bpe_tokenizer.hpp"
#include "runner/tokenize/unicode.hpp"

using axonn::fuzz::require;

namespace {

// A byte-level character as JSON text (the alphabet has no control characters; '"' and
// '\\' are escaped).
std::string json_char(char32_t cp) {
  std::string out;
  if (cp == '"' || cp == '\\') out.push_back('\\');
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// 256 byte tokens, a few merges (space+t, he, in, 12, 123, the, two and four spaces), two
// added tokens.
std::string tiny_tokenizer_json(const std::string& normalizer, const std::string& pre_tokenizer, bool ignore_merges) {
  const auto alphabet = axonn::tokenize::byte_level_alphabet();
  auto c = [&](char b) { return json_char(alphabet[static_cast<unsigned char>(b)]); };
  std::string vocab, merges;
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab.append(id ? "," : "").append("\"").append(json_char(alphabet[b])).append("\":").append(std::to_string(id++));
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {c(' '), "t"}, {"h", "e"}, {"i", "n"}, {"1", "2"}, {"12", "3"}, {c(' ') + "t", "he"}, {c(' '), c(' ')},
      {c(' ') + c(' '), c(' ') + c(' ')}};
  for (const auto& [a, b] : pairs) {
    vocab.append(",\"").append(a).append(b).append("\":").append(std::to_string(id++));
    merges.append(merges.empty() ? "" : ",").append("[\"").append(a).append("\",\"").append(b).append("\"]");
  }
  std::string json = "{\"added_tokens\":[{\"id\":" + std::to_string(id) + ",\"content\":\"<|endoftext|>\"},";
  json.append("{\"id\":").append(std::to_string(id + 1)).append(",\"content\":\"<|im_start|>\"}],");
  json.append("\"normalizer\":").append(normalizer).append(",\"pre_tokenizer\":").append(pre_tokenizer);
  json.append(",\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"ignore_merges\":");
  json.append(ignore_merges ? "true" : "false").append(",\"vocab\":{").append(vocab).append("},\"merges\":[");
  json.append(merges).append("]}}");
  return json;
}

struct Tokenizers {
  std::unique_ptr<axonn::Tokenizer> gpt2, llama3_nfc;
};

const Tokenizers& tokenizers() {
  static const Tokenizers t = [] {
    const std::string llama3_split =
        R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})";
    Tokenizers made;
    made.gpt2 = axonn::load_bpe_tokenizer_json(tiny_tokenizer_json("null", R"({"type":"ByteLevel"})", false), "gpt2");
    made.llama3_nfc = axonn::load_bpe_tokenizer_json(tiny_tokenizer_json(R"({"type":"NFC"})", llama3_split, true), "llama3");
    return made;
  }();
  return t;
}

void check(const axonn::Tokenizer& t, std::string_view text, const std::string& expected) {
  const std::vector<int32_t> ids = t.encode(text);
  for (int32_t id : ids) require(id >= 0 && id < t.vocab_size(), t.description());
  require(t.decode(ids) == expected, text);
}

// What the NFC tokenizer decodes to: added tokens are matched in the raw text, as Hugging Face
// tokenizers match tokens whose `normalized` is false, and only the text between them is
// normalized ("<|im_start|>" + U+0338 keeps its '>'; NFC of the whole would fold it into U+226F).
// Neither token is a prefix of the other, so the first that starts at a position is the match.
std::string nfc_between_added_tokens(std::string_view text) {
  std::string out;
  size_t piece_start = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    for (std::string_view token : {std::string_view("<|endoftext|>"), std::string_view("<|im_start|>")}) {
      if (text.substr(i).starts_with(token)) len = token.size();
    }
    if (len == 0) {
      ++i;
      continue;
    }
    out.append(axonn::tokenize::nfc(text.substr(piece_start, i - piece_start))).append(text.substr(i, len));
    i += len;
    piece_start = i;
  }
  return out.append(axonn::tokenize::nfc(text.substr(piece_start)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check(*tokenizers().gpt2, text, std::string(text));
  check(*tokenizers().llama3_nfc, text, nfc_between_added_tokens(text));
  return 0;
}
