// `axonn data prepare` and `axonn data info` as a user runs them: output, the file written,
// and exit code 2 with a clear message for bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "process_helpers.hpp"
#include "scratch_dir.hpp"

namespace {

namespace fs = std::filesystem;
using axonn::test::contains;
using axonn::test::kAxonn;
using axonn::test::run_command;

class DataCli : public axonn::test::ScratchDirTest {
 protected:
  axonn::test::CommandResult axonn(const std::string& args) const { return run_command(kAxonn + " " + args); }
};

TEST_F(DataCli, PrepareWritesAnLlmcFileThatInfoDescribes) {
  const std::string text = "the cat sat on the mat. the dog sat on the log.\n";
  const std::string in = write("story.txt", text);
  const std::string out = path("story.bin");
  const auto prepared = axonn("data prepare " + in + " -o " + out);
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  EXPECT_TRUE(contains(prepared.output, "wrote " + out + ": 48 tokens")) << prepared.output;
  EXPECT_EQ(fs::file_size(out), 1024u + 2 * text.size());

  const auto info = axonn("data info " + out + " --sequence 8 --vocab 256 --global-batch 4");
  ASSERT_EQ(info.code, 0) << info.output;
  for (const std::string line : {"format:   llm.c tokens", "tokens:   48", "max id:   116 (needs vocab >= 117)",
                                 "samples:  5 of sequence 8", "ok:       trains vocab 256, sequence 8, global batch 4"})
    EXPECT_TRUE(contains(info.output, line)) << line << "\n" << info.output;

  // The long option spelling works too, and the text itself reads as bytes.
  EXPECT_EQ(axonn("data prepare " + in + " --output=" + path("again.bin")).code, 0);
  const auto text_info = axonn("data info " + in + " --sequence 8");
  EXPECT_EQ(text_info.code, 0) << text_info.output;
  EXPECT_TRUE(contains(text_info.output, "format:   text bytes")) << text_info.output;
}

TEST_F(DataCli, InfoWithoutAFileDescribesTheBuiltinCorpus) {
  const auto r = axonn("data info --sequence 64 --vocab 256 --global-batch 12");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "built-in corpus")) << r.output;
  EXPECT_TRUE(contains(r.output, "tokens:   1048576")) << r.output;
  EXPECT_TRUE(contains(r.output, "samples:  16383 of sequence 64")) << r.output;
}

TEST_F(DataCli, BadInputExitsTwoWithAClearMessage) {
  const auto missing = axonn("data prepare " + path("nope.txt") + " -o " + path("x.bin"));
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, "axonn data: cannot open data file '" + path("nope.txt") + "'"))
      << missing.output;
  EXPECT_FALSE(fs::exists(path("x.bin")));

  const auto empty = axonn("data prepare " + write("empty.txt", "") + " -o " + path("x.bin"));
  EXPECT_EQ(empty.code, 2) << empty.output;
  EXPECT_TRUE(contains(empty.output, "is empty")) << empty.output;

  std::string header(1024, '\0');  // llm.c's magic 20240520 with version 9, little-endian
  const uint32_t fields[] = {20240520, 9, 1};
  for (size_t i = 0; i < 12; ++i) header[i] = static_cast<char>(fields[i / 4] >> (8 * (i % 4)));
  const auto version = axonn("data info " + write("v9.bin", header + "xy"));
  EXPECT_EQ(version.code, 2) << version.output;
  EXPECT_TRUE(contains(version.output, "header version 9")) << version.output;

  const auto format = axonn("data info " + write("a.txt", "abc") + " --format csv");
  EXPECT_EQ(format.code, 2) << format.output;
  EXPECT_TRUE(contains(format.output, "unknown data format 'csv'")) << format.output;

  const auto vocab = axonn("data info " + path("a.txt") + " --sequence 1 --vocab 98");
  EXPECT_EQ(vocab.code, 2) << vocab.output;
  EXPECT_TRUE(contains(vocab.output, "token id 98 at position 1")) << vocab.output;

  const auto short_file = axonn("data info " + path("a.txt") + " --sequence 1 --global-batch 3");
  EXPECT_EQ(short_file.code, 2) << short_file.output;
  EXPECT_TRUE(contains(short_file.output, "holds 2 samples")) << short_file.output;
  EXPECT_TRUE(contains(short_file.output, "one global batch of 3 samples")) << short_file.output;

  const auto no_output = axonn("data prepare " + path("a.txt"));
  EXPECT_EQ(no_output.code, 2) << no_output.output;
  EXPECT_TRUE(contains(no_output.output, "needs -o OUT.bin")) << no_output.output;

  EXPECT_EQ(axonn("data frobnicate").code, 2);
  EXPECT_EQ(axonn("data").code, 2);
  EXPECT_EQ(axonn("data info --sequence zero").code, 2);
  EXPECT_EQ(axonn("data --help").code, 0);
}

}  // namespace
