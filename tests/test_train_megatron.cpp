// A job trains on a Megatron-LM pair (PREFIX.bin + PREFIX.idx, written by tests/
// megatron_fixture.py, an independent transcription of Megatron's writer) exactly as on an
// llm.c file of the same tokens: the pair is read in place, the samples are the same windows
// over the same stream, so every loss and every weight is the same to the bit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train_helpers.hpp"

namespace axonn::test {
namespace {

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

class TrainMegatron : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("megatron"); }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(TrainMegatron, TrainsToTheSameBitsAsAnLlmcFileOfTheSameTokens) {
  // 3000 byte-level tokens of English-like text, cut into documents of 7 to 96 tokens.
  const std::vector<std::string> words = {"the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "far.\n"};
  std::vector<int32_t> tokens;
  for (size_t w = 0; tokens.size() < 3000; ++w)
    for (const char c : words[(w * 5 + w / 9) % words.size()]) tokens.push_back(static_cast<unsigned char>(c));
  tokens.resize(3000);

  // llm.c's GPT-2 file: the 256-int32 header (magic, version, count), then uint16 tokens.
  std::string llmc = le32(20240520) + le32(1) + le32(static_cast<uint32_t>(tokens.size()));
  llmc.resize(1024, '\0');
  for (const int32_t t : tokens) llmc += std::string{static_cast<char>(t), '\0'};
  write_file(dir_ / "tokens.bin", llmc);

  std::string docs;
  for (size_t at = 0, d = 0; at < tokens.size(); ++d) {
    const size_t length = std::min(tokens.size() - at, 7 + (d * 37) % 90);
    for (size_t i = 0; i < length; ++i) docs += (i ? " " : "") + std::to_string(tokens[at + i]);
    docs += "\n";
    at += length;
  }
  write_file(dir_ / "docs.txt", docs);
  const CommandResult made = run_command("/usr/bin/python3 " + kSourceDir + "/tests/megatron_fixture.py " +
                                         (dir_ / "docs.txt").string() + " " + (dir_ / "corpus").string() +
                                         " --vocab 50257");
  ASSERT_EQ(made.code, 0) << "tests/megatron_fixture.py needs /usr/bin/python3 with numpy (python3-numpy):\n"
                          << made.output;

  const TrainedRun llmc_run =
      train_in(dir_ / "llmc", tiny_job(3, 0), 2, "2x1x1x1", "data.path=" + (dir_ / "tokens.bin").string());
  const TrainedRun megatron_run =
      train_in(dir_ / "megatron", tiny_job(3, 0), 2, "2x1x1x1", "data.path=" + (dir_ / "corpus").string());
  ASSERT_TRUE(contains(megatron_run.output, "Megatron indexed dataset (uint16), 3000 tokens")) << megatron_run.output;
  ASSERT_EQ(llmc_run.steps.size(), 3u);
  ASSERT_EQ(megatron_run.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(megatron_run.steps[i].loss, llmc_run.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(megatron_run.steps[i].grad_norm, llmc_run.steps[i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(megatron_run.steps[i].data_cursor, llmc_run.steps[i].data_cursor) << "step " << i + 1;
  }
  expect_same_tensors(megatron_run.tensors, llmc_run.tensors, 0.0f, "megatron vs llm.c");
  // format = "megatron" naming the .idx trains the same.
  const TrainedRun named = train_in(dir_ / "named", tiny_job(3, 0), 2, "2x1x1x1",
                                    "data.path=" + (dir_ / "corpus.idx").string() + " data.format=megatron");
  ASSERT_EQ(named.steps.size(), 3u);
  EXPECT_EQ(named.steps.back().loss, llmc_run.steps.back().loss);
}

}  // namespace
}  // namespace axonn::test
