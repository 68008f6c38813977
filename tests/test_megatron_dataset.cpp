// Megatron-LM indexed datasets (trainer/data/megatron_*): pairs written by an independent
// transcription of Megatron's writer (tests/megatron_fixture.py) read in place; axonn's writer
// byte for byte against it; the same samples as an llm.c file of the same tokens; every kind
// of damaged pair refused with a message naming the file and the field; `axonn data info`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data_error.hpp"
#include "process_helpers.hpp"
#include "scratch_dir.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/data/megatron_dataset.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace axonn {
namespace {

namespace fs = std::filesystem;
using test::contains;
using test::expect_data_error;
using test::kAxonn;
using test::kSourceDir;
using test::run_command;
using Docs = std::vector<std::vector<int32_t>>;

std::string read_all(const std::string& path) {
  std::string bytes(fs::file_size(path), '\0');
  std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

std::vector<int32_t> all_tokens(const TokenData& data) {
  std::vector<int32_t> tokens(static_cast<size_t>(data.size()));
  data.copy(0, data.size(), tokens.data());
  return tokens;
}

std::vector<int32_t> concatenated(const Docs& docs) {
  std::vector<int32_t> all;
  for (const auto& d : docs) all.insert(all.end(), d.begin(), d.end());
  return all;
}

// Documents with an empty one, a one-token one and ids near the dtype's top.
Docs sample_docs(int32_t top) {
  Docs docs;
  for (int d = 0; d < 9; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < (d * 7) % 12; ++i) doc.push_back((d * 1009 + i * 37) % 1000);
    docs.push_back(doc);
  }
  docs[3] = {top};
  docs[5].push_back(top - 1);
  return docs;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

class MegatronData : public test::ScratchDirTest {
 protected:
  // Writes PREFIX.bin/.idx with tests/megatron_fixture.py; `options` as that script takes them.
  std::string python_pair(const Docs& docs, const std::string& name, const std::string& options) const {
    std::string text;
    for (const auto& doc : docs) {
      for (size_t i = 0; i < doc.size(); ++i) text += (i ? " " : "") + std::to_string(doc[i]);
      text += "\n";
    }
    const std::string list = write(name + ".docs", text);
    const std::string prefix = path(name);
    const auto r = run_command("/usr/bin/python3 " + kSourceDir + "/tests/megatron_fixture.py " + list + " " + prefix +
                               " " + options);
    EXPECT_EQ(r.code, 0) << "tests/megatron_fixture.py needs /usr/bin/python3 with numpy (python3-numpy, "
                            "scripts/install-deps.sh):\n"
                         << r.output;
    return prefix;
  }

  std::string axonn_pair(const Docs& docs, const std::string& name, TokenType dtype) const {
    MegatronWriter writer(path(name), dtype);
    for (const auto& doc : docs) writer.add_document(doc);
    writer.finish();
    return path(name);
  }
};

// ---- reading what Megatron writes --------------------------------------------------------------

TEST_F(MegatronData, ReadsMegatronsUint16AndInt32PairsInPlace) {
  for (const auto& [dtype, top] : {std::pair{std::string("uint16"), 65535}, std::pair{std::string("int32"), 128255}}) {
    const Docs docs = sample_docs(top);
    const std::string prefix = python_pair(docs, "corpus_" + dtype, "--dtype " + dtype);
    const MegatronDataset pair = MegatronDataset::open(prefix);
    const MegatronIndex& index = pair.index();
    EXPECT_EQ(token_type_name(index.dtype), dtype);
    EXPECT_EQ(index.sequence_count, 9);
    EXPECT_EQ(index.document_count, 9);
    const int width = dtype == "uint16" ? 2 : 4;
    int64_t offset = 0;
    for (int64_t i = 0; i < 9; ++i) {
      EXPECT_EQ(index.sequence_length(i), static_cast<int32_t>(docs[static_cast<size_t>(i)].size()));
      EXPECT_EQ(index.sequence_pointer(i), offset);
      EXPECT_EQ(index.document_index(i), i);
      offset += index.sequence_length(i) * width;
    }
    EXPECT_EQ(index.document_index(9), 9);
    EXPECT_EQ(pair.format_name(), "Megatron indexed dataset (" + dtype + ")");

    const TokenData tokens = pair.tokens();
    EXPECT_TRUE(tokens.mapped());
    EXPECT_EQ(all_tokens(tokens), concatenated(docs));
    EXPECT_EQ(tokens.id_range().highest, top);
    EXPECT_EQ(tokens.description(), prefix + " (Megatron indexed dataset (" + dtype + "), " +
                                         std::to_string(concatenated(docs).size()) + " tokens in 9 documents)");
  }
}

TEST_F(MegatronData, TokenDataOutlivesTheDatasetAndReadsWindows) {
  const Docs docs = sample_docs(60000);
  TokenData tokens;
  {
    const MegatronDataset pair = MegatronDataset::open(python_pair(docs, "c", "--vocab 65499") + ".idx");
    EXPECT_EQ(pair.index().dtype, TokenType::uint16);  // Megatron's choice below 65500
    tokens = pair.tokens();
  }
  const std::vector<int32_t> all = concatenated(docs);
  std::vector<int32_t> window(5);
  tokens.copy(7, 5, window.data());
  EXPECT_EQ(window, std::vector<int32_t>(all.begin() + 7, all.begin() + 12));
  EXPECT_EQ(tokens.at(tokens.size() - 1), all.back());
  EXPECT_THROW(tokens.copy(tokens.size() - 2, 3, window.data()), std::out_of_range);
}

TEST_F(MegatronData, AcceptsATextOnlyMultimodalIndex) {
  // Megatron's multimodal builder writes one int8 mode per sequence after the document indices.
  const Docs docs = sample_docs(100);
  const MegatronDataset pair = MegatronDataset::open(python_pair(docs, "mm", "--dtype uint16 --modes"));
  EXPECT_EQ(all_tokens(pair.tokens()), concatenated(docs));
  std::string idx = read_all(pair.idx_path());
  idx[idx.size() - 2] = 1;  // an image sequence
  write("mm.idx", idx);
  expect_data_error([&] { MegatronDataset::open(path("mm")); }, {path("mm.idx"), "sequence_modes[7] is 1", "multimodal"});
}

TEST_F(MegatronData, ReadsEveryIntegerDtypeAndValidatesAtFullWidth) {
  const Docs docs = {{0, 5, 100}, {}, {7}};
  for (const std::string dtype : {"uint8", "int8", "int16", "int64"}) {
    const TokenData tokens = TokenData::load({python_pair(docs, "w_" + dtype, "--dtype " + dtype), "megatron"});
    EXPECT_EQ(token_type_name(tokens.type()), dtype);
    EXPECT_EQ(all_tokens(tokens), (std::vector<int32_t>{0, 5, 100, 7})) << dtype;
    tokens.validate(101, 1, 3);
  }
  // A negative int8 id and an int64 id above 2^31-1 are named as they are on disk.
  const TokenData negative = TokenData::load({python_pair({{1, -3}}, "neg", "--dtype int8"), "megatron"});
  expect_data_error([&] { negative.validate(256, 1, 1); }, {"token id -3 at position 1"});
  const std::string prefix = python_pair({{1, 2}}, "wide", "--dtype int64");
  std::string bin = read_all(prefix + ".bin");
  bin.replace(8, 8, le64(uint64_t{1} << 40));
  write("wide.bin", bin);
  const TokenData wide = TokenData::load({prefix, "megatron"});
  expect_data_error([&] { wide.validate(256, 1, 1); },
                    {"token id 1099511627776 at position 1", "at least 1099511627777"});
}

// ---- writing as Megatron writes ----------------------------------------------------------------

TEST_F(MegatronData, WriterMatchesMegatronByteForByteAndReadsBack) {
  for (const TokenType dtype : {TokenType::uint16, TokenType::int32}) {
    const Docs docs = sample_docs(dtype == TokenType::uint16 ? 65535 : 200000);
    const std::string ours = axonn_pair(docs, "ours", dtype);
    const std::string theirs = python_pair(docs, "theirs", std::string("--dtype ") + token_type_name(dtype));
    EXPECT_EQ(read_all(ours + ".bin"), read_all(theirs + ".bin")) << token_type_name(dtype);
    EXPECT_EQ(read_all(ours + ".idx"), read_all(theirs + ".idx")) << token_type_name(dtype);
    EXPECT_EQ(all_tokens(MegatronDataset::open(ours).tokens()), concatenated(docs));
    EXPECT_FALSE(fs::exists(ours + ".bin.tmp-" + std::to_string(::getpid())));
    EXPECT_FALSE(fs::exists(ours + ".idx.tmp-" + std::to_string(::getpid())));
  }
}

TEST_F(MegatronData, WriterPicksMegatronsDtypeAndRefusesIdsThatDoNotFit) {
  EXPECT_EQ(MegatronWriter::dtype_for_vocab(50257), TokenType::uint16);
  EXPECT_EQ(MegatronWriter::dtype_for_vocab(65499), TokenType::uint16);
  EXPECT_EQ(MegatronWriter::dtype_for_vocab(65500), TokenType::int32);  // Megatron's optimal_dtype threshold
  EXPECT_EQ(MegatronWriter::dtype_for_vocab(128256), TokenType::int32);
  expect_data_error(
      [&] {
        MegatronWriter writer(path("big"), TokenType::uint16);
        writer.add_document(std::vector<int32_t>{1, 2});
        writer.add_document(std::vector<int32_t>{3, 70000});
        writer.finish();
      },
      {"token id 70000 at position 1 of document 1", "uint16"});
  // Abandoned: no pair, no temporary file.
  EXPECT_TRUE(fs::is_empty(dir_)) << "left behind: " << fs::directory_iterator(dir_)->path();
}

TEST_F(MegatronData, WriterReplacesAnOlderPair) {
  axonn_pair({{1, 2, 3}}, "p", TokenType::uint16);
  axonn_pair({{4}, {5, 6}}, "p", TokenType::int32);
  const MegatronDataset pair = MegatronDataset::open(path("p"));
  EXPECT_EQ(pair.index().dtype, TokenType::int32);
  EXPECT_EQ(all_tokens(pair.tokens()), (std::vector<int32_t>{4, 5, 6}));
}

// ---- the same training data as an llm.c file --------------------------------------------------

TEST_F(MegatronData, SamplesEqualThoseOfAnLlmcFileOfTheSameTokens) {
  Docs docs;
  std::vector<int32_t> all;
  for (int d = 0; d < 40; ++d) {
    docs.emplace_back();
    for (int i = 0; i < 5 + (d * 13) % 31; ++i) docs.back().push_back((d * 131 + i * 7) % 50257);
  }
  all = concatenated(docs);
  write_llmc_file(path("same.bin"), all);
  const std::string prefix = axonn_pair(docs, "pair", TokenType::uint16);
  const TokenData llmc = TokenData::load({path("same.bin"), "auto"});
  for (const std::string& named : {prefix, prefix + ".bin", prefix + ".idx"}) {
    const TokenData megatron = TokenData::load({named, "auto"});
    ASSERT_TRUE(megatron.mapped()) << named;
    ASSERT_EQ(megatron.size(), llmc.size());
    const int T = 16;
    megatron.validate(50257, T, 4);
    const DataMixture a = DataMixture::single(std::make_shared<const TokenData>(llmc), 7, T);
    const DataMixture b = DataMixture::single(std::make_shared<const TokenData>(megatron), 7, T);
    MixtureCursor cursor_a = a.start(), cursor_b = b.start();
    std::vector<int32_t> in_a(10 * T), tg_a(10 * T), in_b(10 * T), tg_b(10 * T);
    for (int batch = 0; batch < 3 * a.samples_of(0) / 10; ++batch) {  // past an epoch
      const std::vector<SampleRef> refs_a = a.take(cursor_a, 10), refs_b = b.take(cursor_b, 10);
      a.read(refs_a.data(), 10, in_a.data(), tg_a.data());
      b.read(refs_b.data(), 10, in_b.data(), tg_b.data());
      EXPECT_EQ(in_a, in_b) << named << " batch " << batch;
      EXPECT_EQ(tg_a, tg_b) << named << " batch " << batch;
    }
  }
}

TEST_F(MegatronData, AutoRecognizesAPairByItsIdx) {
  const std::string prefix = axonn_pair({{1, 2}}, "p", TokenType::uint16);
  EXPECT_EQ(megatron_prefix(prefix, "auto"), prefix);            // no file, both beside it
  EXPECT_EQ(megatron_prefix(prefix + ".bin", "auto"), prefix);   // the .idx beside it
  EXPECT_EQ(megatron_prefix(prefix + ".idx", "auto"), prefix);
  EXPECT_EQ(megatron_prefix(prefix + ".bin", "megatron"), prefix);
  EXPECT_EQ(megatron_prefix(prefix + ".bin", "tokens"), std::nullopt);
  // A .bin alone is nanoGPT's; a prefix that is itself a file is that file.
  write("lone.bin", "abcd");
  EXPECT_EQ(megatron_prefix(path("lone.bin"), "auto"), std::nullopt);
  write("p", "text");
  EXPECT_EQ(megatron_prefix(prefix, "auto"), std::nullopt);
  EXPECT_EQ(megatron_prefix(path("absent"), "auto"), std::nullopt);
}

TEST_F(MegatronData, ValidateNamesAnIdOutsideTheVocabularyWithItsPosition) {
  const std::string prefix = axonn_pair({{1, 2, 3}, {4, 300, 5, 65535}}, "v", TokenType::uint16);
  const TokenData data = TokenData::load({prefix, "megatron"});
  expect_data_error([&] { data.validate(256, 1, 1); },
                    {prefix, "token id 300 at position 4", "largest id is 65535", "at least 65536"});
  data.validate(65536, 1, 1);
  expect_data_error([&] { data.validate(65536, 4, 2); }, {"holds 1 samples of 5 tokens"});
}

// ---- damaged pairs -----------------------------------------------------------------------------

class BadMegatron : public MegatronData {
 protected:
  // A valid uint16 pair of 3 documents, 6 tokens: lengths {2, 1, 3}.
  void SetUp() override {
    MegatronData::SetUp();
    prefix_ = axonn_pair({{1, 2}, {3}, {4, 5, 6}}, "bad", TokenType::uint16);
    idx_ = read_all(prefix_ + ".idx");
    bin_ = read_all(prefix_ + ".bin");
    ASSERT_EQ(idx_.size(), 34u + 3 * 12 + 4 * 8);
  }
  // Writes the pair with `idx` and `bin`, then expects open() to fail naming `file` and `parts`.
  void expect_refused(const std::string& idx, const std::string& bin, const std::string& file,
                      std::vector<std::string> parts) const {
    write("bad.idx", idx);
    write("bad.bin", bin);
    parts.push_back("'" + file + "'");
    expect_data_error([&] { MegatronDataset::open(prefix_); }, parts);
    expect_data_error([&] { TokenData::load({prefix_ + ".bin", "auto"}); }, parts);
  }
  std::string with(size_t at, const std::string& bytes) const {
    std::string idx = idx_;
    idx.replace(at, bytes.size(), bytes);
    return idx;
  }
  std::string idx_path() const { return prefix_ + ".idx"; }
  std::string bin_path() const { return prefix_ + ".bin"; }
  std::string prefix_, idx_, bin_;
};

TEST_F(BadMegatron, TruncatedHeader) {
  expect_refused(idx_.substr(0, 20), bin_, idx_path(), {"header is truncated", "size is 20 bytes", "34-byte header"});
  expect_refused("", bin_, idx_path(), {"size is 0 bytes"});
}

TEST_F(BadMegatron, BadMagic) {
  expect_refused(with(0, "MMIDIDY"), bin_, idx_path(), {"magic is \"MMIDIDY\\x00\\x00\"", "MMIDIDX"});
}

TEST_F(BadMegatron, Version) {
  expect_refused(with(9, le64(2)), bin_, idx_path(), {"version is 2, expected 1"});
}

TEST_F(BadMegatron, FloatAndUnknownDtypes) {
  expect_refused(with(17, std::string(1, '\7')), bin_, idx_path(), {"dtype code is 7 (float32)", "integer token type"});
  expect_refused(with(17, std::string(1, '\6')), bin_, idx_path(), {"dtype code is 6 (float64)"});
  expect_refused(with(17, std::string(1, '\11')), bin_, idx_path(), {"dtype code is 9"});
}

TEST_F(BadMegatron, CountsThatOverrunTheIndex) {
  expect_refused(with(18, le64(uint64_t{1} << 63)), bin_, idx_path(), {"sequence count is 9223372036854775808", "overrun"});
  expect_refused(with(18, le64(7)), bin_, idx_path(), {"sequence count is 7", "overrun"});
  expect_refused(with(26, le64(~uint64_t{0})), bin_, idx_path(), {"document count is 18446744073709551615", "overrun"});
  expect_refused(idx_.substr(0, idx_.size() - 8), bin_, idx_path(), {"document count is 4", "overrun"});
}

TEST_F(BadMegatron, NegativeLengthAndNonContiguousPointers) {
  expect_refused(with(34 + 4, std::string("\xff\xff\xff\xff", 4)), bin_, idx_path(), {"sequence_lengths[1] is -1"});
  // Pointers {0, 4, 6} -> {0, 6, 4}: sequences out of order.
  expect_refused(with(34 + 12 + 8, le64(6) + le64(4)), bin_, idx_path(),
                 {"sequence_pointers[1] is 6, expected 4", "contiguous and in order", bin_path()});
}

TEST_F(BadMegatron, TruncatedBinAndTrailingBytes) {
  expect_refused(idx_, bin_.substr(0, bin_.size() - 2), bin_path(),
                 {"size is 10 bytes, expected at least 12", "sequence 2 of " + idx_path(), "truncated"});
  expect_refused(idx_, bin_ + "xy", bin_path(), {"size is 14 bytes, expected 12", "2 trailing bytes"});
}

TEST_F(BadMegatron, BadDocumentIndices) {
  const size_t docs = 34 + 12 * 3;
  expect_refused(with(docs, le64(1)), bin_, idx_path(), {"document_indices[0] is 1, expected 0"});
  expect_refused(with(docs + 16, le64(0)), bin_, idx_path(), {"document_indices[2] is 0", "non-decreasing"});
  expect_refused(with(docs + 24, le64(2)), bin_, idx_path(), {"document_indices ends at 2, expected the sequence count 3"});
  expect_refused(with(docs + 24, le64(4)), bin_, idx_path(), {"document_indices[3] is 4"});
}

TEST_F(BadMegatron, TrailingIndexBytes) {
  expect_refused(idx_ + "xy", bin_, idx_path(), {"2 bytes follow the 4 document indices", "expected none"});
}

TEST_F(BadMegatron, MissingHalf) {
  fs::remove(idx_path());
  expect_data_error([&] { MegatronDataset::open(prefix_ + ".bin"); }, {bin_path(), idx_path(), "is missing"});
  expect_data_error([&] { TokenData::load({prefix_, "megatron"}); }, {idx_path(), "is missing"});
}

// ---- axonn data info ---------------------------------------------------------------------------

TEST_F(MegatronData, DataInfoDescribesAPairAndRefusesADamagedOne) {
  Docs docs;
  for (int d = 0; d < 10; ++d) docs.push_back(std::vector<int32_t>(static_cast<size_t>(10 + d), 200 + d));
  const std::string prefix = python_pair(docs, "info", "--vocab 50257");
  const auto r = run_command(kAxonn + " data info " + prefix + " --sequence 8 --vocab 256 --global-batch 4");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const std::string line : {"format:   Megatron indexed dataset (uint16)", "tokens:   145", "documents: 10",
                                 "sequences: 10", "max id:   209", "samples:  18 of sequence 8", "steps per epoch: 4"})
    EXPECT_TRUE(contains(r.output, line)) << line << " not in:\n" << r.output;
  EXPECT_EQ(run_command(kAxonn + " data info " + prefix + ".bin --format megatron --sequence 8").code, 0);
  const auto vocab = run_command(kAxonn + " data info " + prefix + ".idx --sequence 8 --vocab 205");
  EXPECT_EQ(vocab.code, 2) << vocab.output;
  EXPECT_TRUE(contains(vocab.output, "token id 205 at position")) << vocab.output;

  std::string bin = read_all(prefix + ".bin");
  write("info.bin", bin.substr(0, bin.size() - 2));
  const auto bad = run_command(kAxonn + " data info " + prefix);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, prefix + ".bin") && contains(bad.output, "truncated")) << bad.output;
}

}  // namespace
}  // namespace axonn
