// The training data pipeline (trainer/data): token files in llm.c, nanoGPT and text form, the
// checks that stop a job before training, the global sample order, and the built-in corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "data_error.hpp"
#include "scratch_dir.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace axonn {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
using DataFiles = axonn::test::ScratchDirTest;
using test::expect_data_error;

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string le16(uint32_t v) { return {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; }

// An llm.c header written independently of the code under test (llm.c's write_datafile).
std::string llmc_header(uint32_t magic, uint32_t version, uint32_t count) {
  std::string h = le32(magic) + le32(version) + le32(count);
  h.resize(1024, '\0');
  return h;
}

std::string read_all(const std::string& path) {
  std::string bytes(fs::file_size(path), '\0');
  std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// Every token of `data` as int32, through the copy the trainer uses.
std::vector<int32_t> all_tokens(const TokenData& data) {
  std::vector<int32_t> tokens(static_cast<size_t>(data.size()));
  data.copy(0, data.size(), tokens.data());
  return tokens;
}

// ---- token files ----------------------------------------------------------------------------

TEST_F(DataFiles, LlmcFileOfATextsBytesHasTheHeaderAndLoadsBack) {
  const std::string text = "hello\n\xff";
  const std::string in = write("in.txt", text);
  const std::string out = path("out.bin");
  write_llmc_file(out, read_token_file(in, "text").tokens);

  const std::string bytes = read_all(out);
  ASSERT_EQ(bytes.size(), 1024u + 2 * 7);
  EXPECT_EQ(bytes.substr(0, 12), le32(20240520) + le32(1) + le32(7));
  EXPECT_EQ(bytes.substr(12, 1012), std::string(1012, '\0'));
  EXPECT_EQ(bytes.substr(1024, 4), le16('h') + le16('e'));
  EXPECT_EQ(bytes.substr(1024 + 12, 2), le16(0xff));
  EXPECT_FALSE(fs::exists(out + ".tmp-" + std::to_string(::getpid())));

  const TokenData data = TokenData::load({out, "auto"});
  ASSERT_EQ(data.size(), 7);
  const std::vector<int32_t> tokens = all_tokens(data);
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(tokens[i], static_cast<unsigned char>(text[i]));
  EXPECT_EQ(data.description(), out + " (llm.c tokens, 7 tokens)");
}

TEST_F(DataFiles, LlmcRoundTripKeepsGpt2SizedIds) {
  const std::vector<int32_t> tokens = {50256, 0, 65535, 1, 31373};
  write_llmc_file(path("gpt2.bin"), tokens);
  const TokenFile file = read_token_file(path("gpt2.bin"), "tokens");
  EXPECT_EQ(file.format, "llm.c tokens");
  EXPECT_EQ(file.tokens, tokens);
  expect_data_error(
      [&] {
        write_llmc_file(path("big.bin"), {1, 2, 70000});
      },
      {"token id 70000 at position 2", "uint16"});
  EXPECT_FALSE(fs::exists(path("big.bin")));
}

TEST_F(DataFiles, ReadsLlmcLlama3Uint32Tokens) {
  const std::string f = write("llama.bin", llmc_header(20240801, 7, 3) + le32(128000) + le32(5) + le32(128255));
  const TokenFile file = read_token_file(f, "auto");
  EXPECT_EQ(file.format, "llm.c llama-3 tokens");
  EXPECT_EQ(file.tokens, (std::vector<int32_t>{128000, 5, 128255}));
}

TEST_F(DataFiles, TheLargestLlama3IdIsNamedWithTheVocabularyItNeeds) {
  // 2^31-1 is the largest id a llama-3 file may hold; the fix it needs is a vocabulary of 2^31.
  const std::string f = write("max.bin", llmc_header(20240801, 7, 2) + le32(5) + le32(2147483647));
  const TokenData data = TokenData::load(DataSource{f, "auto"});
  expect_data_error([&] { data.validate(128256, 1, 1); },
                    {"token id 2147483647 at position 1", "set model.vocab to at least 2147483648"});
}

TEST_F(DataFiles, ReadsNanoGptRawUint16) {
  // nanoGPT's prepare.py: np.array(ids, dtype=np.uint16).tofile("train.bin"), no header.
  std::string raw;
  std::vector<int32_t> ids;
  for (int i = 0; i < 1500; ++i) {  // longer than llm.c's header, so the reader's first block is payload too
    ids.push_back((i * 7919) % 50257);
    raw += le16(static_cast<uint32_t>(ids.back()));
  }
  const TokenData data = TokenData::load({write("train.bin", raw), "auto"});
  ASSERT_EQ(data.size(), 1500);
  EXPECT_EQ(all_tokens(data), ids);
  EXPECT_NE(data.description().find("nanoGPT tokens, 1500 tokens"), std::string::npos) << data.description();
  // "tokens" reads uint16 whatever the file is called.
  EXPECT_EQ(read_token_file(write("train.u16", raw), "tokens").tokens, ids);
}

TEST_F(DataFiles, ReadsTextAsOneTokenPerByte) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += static_cast<char>(b);
  const TokenFile file = read_token_file(write("all.txt", text), "auto");
  EXPECT_EQ(file.format, "text bytes");
  ASSERT_EQ(file.tokens.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(file.tokens[static_cast<size_t>(b)], b);
}

TEST_F(DataFiles, AutoDetectsByMagicThenSuffix) {
  const std::string llmc = llmc_header(20240520, 1, 2) + le16(300) + le16(7);
  // The magic wins over the name.
  EXPECT_EQ(read_token_file(write("tokens.dat", llmc), "auto").format, "llm.c tokens");
  EXPECT_EQ(read_token_file(write("tokens.bin", llmc), "auto").tokens, (std::vector<int32_t>{300, 7}));
  // Without the magic: .bin is nanoGPT, anything else text.
  EXPECT_EQ(read_token_file(write("raw.bin", "abcd"), "auto").format, "nanoGPT tokens");
  EXPECT_EQ(read_token_file(write("raw.txt", "abcd"), "auto").format, "text bytes");
  // "text" forces bytes even on an llm.c file.
  EXPECT_EQ(read_token_file(path("tokens.bin"), "text").tokens.size(), llmc.size());
}

TEST_F(DataFiles, BadHeaderVersionIsAnErrorNamingFileAndVersion) {
  const std::string f = write("v2.bin", llmc_header(20240520, 2, 1) + le16(1));
  expect_data_error([&] { read_token_file(f, "auto"); }, {f, "header version 2", "reads version 1"});
}

TEST_F(DataFiles, TruncatedLlmcFileIsAnErrorNamingTheFile) {
  std::string payload;
  for (int i = 0; i < 50; ++i) payload += le16(1);
  const std::string f = write("cut.bin", llmc_header(20240520, 1, 100) + payload);
  expect_data_error([&] { TokenData::load({f, "auto"}); }, {f, "truncated", "100 tokens", "only 100 bytes"});
  const std::string g = write("long.bin", llmc_header(20240520, 1, 10) + payload);
  expect_data_error([&] { TokenData::load({g, "auto"}); }, {g, "80 bytes after the 10 tokens"});
  const std::string h = write("short.bin", le32(20240520) + le32(1));
  expect_data_error([&] { TokenData::load({h, "auto"}); }, {h, "shorter (8 bytes)"});
}

TEST_F(DataFiles, EmptyFilesAreErrors) {
  const std::string f = write("empty.txt", "");
  expect_data_error([&] { TokenData::load({f, "auto"}); }, {f, "is empty"});
  const std::string g = write("zero.bin", llmc_header(20240520, 1, 0));
  expect_data_error([&] { TokenData::load({g, "auto"}); }, {g, "is empty", "declares 0 tokens"});
  expect_data_error([] { TokenData::from_tokens({}, "nothing").validate(256, 8, 1); }, {"nothing has no tokens"});
}

TEST_F(DataFiles, MissingFileOddSizeAndUnknownFormatAreErrors) {
  expect_data_error([&] { TokenData::load({path("nope.bin"), "auto"}); }, {path("nope.bin"), "No such file"});
  const std::string odd = write("odd.bin", "abc");
  expect_data_error([&] { TokenData::load({odd, "auto"}); }, {odd, "odd size (3 bytes)", "\"text\""});
  expect_data_error([&] { TokenData::load({odd, "csv"}); }, {"unknown data format 'csv'", "\"auto\""});
}

TEST(DataTokenData, EmptyPathIsTheBuiltinCorpus) {
  const TokenData data = TokenData::load({"", "auto"});
  EXPECT_EQ(data.size(), builtin_corpus().size());
  EXPECT_EQ(data.description().rfind("built-in corpus", 0), 0u) << data.description();
}

// ---- validate ---------------------------------------------------------------------------------

std::vector<int32_t> iota_tokens(int64_t n, int32_t modulo) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(i % modulo);
  return t;
}

TEST(DataTokenData, TooShortForOneGlobalBatchNamesBothCounts) {
  // 12 samples of 64+1 tokens need 12*64+1 = 769 tokens.
  TokenData::from_tokens(iota_tokens(769, 256), "d").validate(256, 64, 12);
  expect_data_error([] { TokenData::from_tokens(iota_tokens(768, 256), "d").validate(256, 64, 12); },
                    {"d holds 11 samples of 65 tokens", "one global batch of 12 samples", "at least 769 tokens"});
}

TEST(DataTokenData, IdOutsideVocabNamesIdAndPosition) {
  std::vector<int32_t> t = iota_tokens(1000, 200);
  t[737] = 300;
  t[900] = 301;
  expect_data_error([&] { TokenData::from_tokens(t, "d").validate(256, 64, 1); },
                    {"token id 300 at position 737", "[0, 256)", "largest id is 301", "at least 302"});
  TokenData::from_tokens(t, "d").validate(302, 64, 1);
  t[5] = -1;
  expect_data_error([&] { TokenData::from_tokens(t, "d").validate(302, 64, 1); }, {"token id -1 at position 5"});
}

// ---- sample order -----------------------------------------------------------------------------

// The windows (start / T) that global samples [epoch*n, (epoch+1)*n) read.
std::vector<int64_t> epoch_windows(const SampleOrder& order, int64_t epoch) {
  std::vector<int64_t> w;
  const int64_t n = order.sample_count();
  for (int64_t g = epoch * n; g < (epoch + 1) * n; ++g) {
    const int64_t start = order.sample_start(g);
    EXPECT_EQ(start % order.sequence(), 0) << "g " << g;
    w.push_back(start / order.sequence());
  }
  return w;
}

TEST(DataSampleOrder, EveryWindowExactlyOncePerEpoch) {
  for (const int64_t n : {1, 2, 3, 4, 5, 7, 17, 97, 255, 256, 257, 1000, 4096, 4097, 10007}) {
    for (const int sequence : {1, 64}) {
      const SampleOrder order(1337, n * sequence + 1 + sequence / 2, sequence);  // a partial window at the end
      ASSERT_EQ(order.sample_count(), n);
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        for (const int64_t w : epoch_windows(order, epoch)) {
          ASSERT_GE(w, 0);
          ASSERT_LT(w, n);
          ++seen[static_cast<size_t>(w)];
        }
        for (int64_t w = 0; w < n; ++w) ASSERT_EQ(seen[static_cast<size_t>(w)], 1) << "n " << n << " window " << w;
      }
    }
  }
}

TEST(DataSampleOrder, DiffersPerEpochAndPerSeedAndShuffles) {
  const int64_t n = 1000;
  const SampleOrder a(1337, n * 8 + 1, 8), b(1338, n * 8 + 1, 8);
  const auto e0 = epoch_windows(a, 0), e1 = epoch_windows(a, 1), other_seed = epoch_windows(b, 0);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, other_seed);
  // A random permutation has ~1 fixed point and ~n/2 ascents; identity or a near-sorted
  // order would show here.
  int fixed = 0, ascents = 0;
  for (size_t i = 0; i < e0.size(); ++i) {
    fixed += e0[i] == static_cast<int64_t>(i);
    if (i > 0) ascents += e0[i] > e0[i - 1];
  }
  EXPECT_LT(fixed, 8);
  EXPECT_GT(ascents, 430);
  EXPECT_LT(ascents, 570);
}

TEST(DataSampleOrder, IsDeterministicAndPinned) {
  // Pinned: a change of the permutation (mixer, rounds, key schedule) changes every run's
  // data order and breaks resuming an older run's checkpoint at the same cursor. The values
  // agree with a separate Python transcription of the construction in sample_order.cpp.
  const SampleOrder order(1337, 1000 * 64 + 1, 64);
  const SampleOrder again(1337, 1000 * 64 + 1, 64);
  std::vector<int64_t> first;
  for (int64_t g : {0, 1, 2, 3, 999, 1000, 123456}) {
    first.push_back(order.sample_start(g) / 64);
    EXPECT_EQ(order.sample_start(g), again.sample_start(g));
  }
  EXPECT_EQ(first, (std::vector<int64_t>{990, 551, 545, 170, 774, 607, 467}));
  const SampleOrder other(7, 4097 * 2 + 1, 2);
  EXPECT_EQ((std::vector<int64_t>{other.sample_start(0), other.sample_start(4096), other.sample_start(4097)}),
            (std::vector<int64_t>{3660, 7088, 6222}));
}

TEST(DataSampleOrder, UsesConstantMemoryAtAnySize) {
  // No per-sample state: the object is its three fields, and 2^44 samples (a shuffled index
  // array would need 128 TiB) work at once.
  static_assert(sizeof(SampleOrder) <= 24);
  const int64_t tokens = (int64_t{1} << 50) + 1;
  const SampleOrder order(42, tokens, 64);
  EXPECT_EQ(order.sample_count(), int64_t{1} << 44);
  for (int64_t g : {int64_t{0}, int64_t{1}, (int64_t{1} << 44) - 1, int64_t{1} << 45}) {
    const int64_t start = order.sample_start(g);
    EXPECT_GE(start, 0);
    EXPECT_LE(start + 64 + 1, tokens);
    EXPECT_EQ(start % 64, 0);
  }
}

TEST(DataSampleOrder, RejectsDataWithoutASampleAndBadArguments) {
  expect_data_error([] { SampleOrder(1, 64, 64); }, {"64 tokens hold no sample of 65 tokens"});
  EXPECT_EQ(SampleOrder(1, 65, 64).sample_count(), 1);
  EXPECT_EQ(SampleOrder(1, 65, 64).sample_start(5), 0);
  EXPECT_THROW(SampleOrder(1, 100, 0), std::invalid_argument);
  EXPECT_THROW(SampleOrder(1, 100, 8).sample_start(-1), std::out_of_range);
}

// ---- built-in corpus --------------------------------------------------------------------------

uint64_t fnv1a(const TokenData& data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const int32_t t : all_tokens(data)) h = (h ^ static_cast<uint64_t>(t)) * 0x100000001b3ULL;
  return h;
}

TEST(DataBuiltinCorpus, IsDeterministicAndPinned) {
  const TokenData a = builtin_corpus(), b = builtin_corpus();
  ASSERT_EQ(a.size(), 1 << 20);
  EXPECT_EQ(fnv1a(a), fnv1a(b));
  // Pinned: the same bytes on every platform; a change here changes every default run.
  EXPECT_EQ(fnv1a(a), 0x7c1243f3c8c8a7daULL);
  // It trains the tiny job (vocab 256, T 64, global batch 12).
  a.validate(256, 64, 12);
  EXPECT_EQ(a.description(), "built-in corpus (byte-level English-like text, 1048576 tokens)");
}

TEST(DataBuiltinCorpus, HasStructureAModelCanLearn) {
  // The next byte is far more predictable from the previous one than on its own: the
  // bigram conditional entropy H(X2|X1) is well below the unigram entropy H(X1) (nats).
  const TokenData c = builtin_corpus();
  const std::vector<int32_t> t = all_tokens(c);
  std::vector<double> uni(256, 0);
  std::map<int, double> bi;
  for (size_t i = 0; i < t.size(); ++i) {
    uni[static_cast<size_t>(t[i])] += 1;
    if (i > 0) bi[t[i - 1] * 256 + t[i]] += 1;
  }
  auto entropy = [](auto values, double total) {
    double h = 0;
    for (double v : values)
      if (v > 0) h -= v / total * std::log(v / total);
    return h;
  };
  std::vector<double> bi_counts;
  for (const auto& kv : bi) bi_counts.push_back(kv.second);
  const double h1 = entropy(uni, static_cast<double>(c.size()));
  const double h2_given_1 = entropy(bi_counts, static_cast<double>(c.size() - 1)) - h1;
  EXPECT_LT(h1, 3.5);                // ~3.25: a small alphabet, far below ln 256 = 5.55
  EXPECT_LT(h2_given_1, 0.75 * h1);  // ~2.12
  EXPECT_GT(h2_given_1, 1.0);        // but not a trivial repetition
}

TEST(DataBuiltinCorpus, ArithmeticFactsAreTrue) {
  // Every "a + b = c.", "a - b = c." and "a x b = c." in the text is correct, so a model can
  // learn arithmetic rather than noise.
  const TokenData c = builtin_corpus();
  std::string text;
  for (const int32_t t : all_tokens(c)) text += static_cast<char>(t);
  int checked = 0;
  for (size_t at = text.find(" = "); at != std::string::npos; at = text.find(" = ", at + 1)) {
    // "<a> <op> <b> = <c>." with a, b, c decimal; the last fact may be cut by the 1 MiB end.
    size_t b_end = at, b_begin = text.rfind(' ', b_end - 1) + 1;
    const size_t op = b_begin - 2, a_end = op - 1;
    size_t a_begin = a_end;
    while (a_begin > 0 && std::isdigit(static_cast<unsigned char>(text[a_begin - 1]))) --a_begin;
    const size_t c_begin = at + 3, c_end = text.find('.', c_begin);
    if (c_end == std::string::npos) break;
    const int a = std::stoi(text.substr(a_begin, a_end - a_begin)),
              b = std::stoi(text.substr(b_begin, b_end - b_begin));
    const int result = std::stoi(text.substr(c_begin, c_end - c_begin));
    const char o = text[op];
    const int expected = o == '+' ? a + b : o == '-' ? a - b : a * b;
    ASSERT_TRUE(o == '+' || o == '-' || o == 'x') << text.substr(a_begin, c_end - a_begin);
    ASSERT_EQ(result, expected) << text.substr(a_begin, c_end - a_begin + 1);
    ++checked;
  }
  EXPECT_GT(checked, 5000);  // 7118
}

}  // namespace
}  // namespace axonn
