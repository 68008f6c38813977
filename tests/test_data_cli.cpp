// `axonn data prepare` and `axonn data info` as a user runs them: output, the file written,
// and exit code 2 with a clear message for bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "process_helpers.hpp"
#include "runner/tokenize/tokenizer.hpp"
#include "scratch_dir.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace {

namespace fs = std::filesystem;
using axonn::test::contains;
using axonn::test::kAxonn;
using axonn::test::kSourceDir;
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

// A folder of JSON Lines and text, in path order, on two threads; decode shows a sample's text.
TEST_F(DataCli, PrepareReadsFoldersOfJsonLinesAndDecodeShowsASample) {
  fs::create_directories(path("corpus/b"));
  write("corpus/a.jsonl", "{\"id\": 1, \"body\": \"first document. \"}\n\n{\"body\": \"second \\u00e9. \"}\n");
  write("corpus/b/c.txt", "third, plain text.");
  const auto prepared = axonn("data prepare " + path("corpus") + " --field body --threads 2 -o " + path("out.bin"));
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  const std::string text = std::string("first document. ") + "second \xc3\xa9. " + "third, plain text.";
  EXPECT_TRUE(contains(prepared.output, "wrote " + path("out.bin") + ": " + std::to_string(text.size()) +
                                            " tokens in 3 documents (llm.c tokens (uint16))"))
      << prepared.output;
  EXPECT_TRUE(contains(prepared.output, "from 2 input files")) << prepared.output;

  const auto decoded = axonn("data decode " + path("out.bin") + " --sequence 8 --sample 2 --ids");
  ASSERT_EQ(decoded.code, 0) << decoded.output;
  // Window 2 of sequence 8: tokens [16, 25), which begin the second document.
  EXPECT_TRUE(contains(decoded.output, "sample 2 of " + std::to_string((text.size() - 1) / 8) + ": tokens [16, 25)"))
      << decoded.output;
  EXPECT_TRUE(contains(decoded.output, "\n" + text.substr(16, 9) + "\n")) << decoded.output;
  EXPECT_TRUE(contains(decoded.output, "ids: 115 101 99 111 110 100 32 195 169")) << decoded.output;
}

// Llama 3's tokenizer.json: each document's ids as the library encodes them (its exactness
// against the reference is test_tokenizer's), then <|end_of_text|>, in llm.c's uint32 form.
TEST_F(DataCli, PrepareWithATokenizerWritesItsIdsAndDecodeReadsThemBack) {
  const std::string tokenizer = kSourceDir + "/tests/tokenizer_fixtures/llama3.tokenizer.json";
  const std::vector<std::string> documents = {"Hello, world! It's 2026.", "  def f(x):\n\treturn x ** 2\n",
                                              "Ünïcödé and emoji \xf0\x9f\x98\x80 too."};
  std::string lines;
  for (const std::string& d : documents) {
    std::string escaped;
    for (const char c : d) escaped += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
    lines += "{\"text\": \"" + escaped + "\"}\n";
  }
  const auto prepared = axonn("data prepare " + write("docs.jsonl", lines) + " --tokenizer " + tokenizer + " -o " +
                              path("llama.bin"));
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  EXPECT_TRUE(contains(prepared.output, "in 3 documents (llm.c llama-3 tokens (uint32))")) << prepared.output;
  EXPECT_TRUE(contains(prepared.output, "tokenizer: ")) << prepared.output;

  const std::unique_ptr<axonn::Tokenizer> llama = axonn::load_tokenizer(tokenizer);
  std::vector<int32_t> want;
  for (const std::string& d : documents) {
    const std::vector<int32_t> ids = llama->encode(d);
    want.insert(want.end(), ids.begin(), ids.end());
    want.push_back(128001);  // <|end_of_text|>
  }
  EXPECT_EQ(axonn::read_token_file(path("llama.bin"), "tokens").tokens, want);

  const auto decoded = axonn("data decode " + path("llama.bin") + " --tokenizer " + tokenizer + " --sequence " +
                             std::to_string(want.size() - 1));
  ASSERT_EQ(decoded.code, 0) << decoded.output;
  EXPECT_TRUE(contains(decoded.output, documents[0] + "<|end_of_text|>" + documents[1])) << decoded.output;

  const auto bad = axonn("data prepare " + path("docs.jsonl") + " --tokenizer " + write("t.json", "{\"model\": 1}") +
                         " -o " + path("x.bin"));
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, path("t.json"))) << bad.output;
  EXPECT_FALSE(fs::exists(path("x.bin")));
}

// A SentencePiece .model through libsentencepiece in the same process as the TensorBoard
// writer's protobuf (the library bundles another protobuf: each must keep its own), into a
// Megatron pair whose ids are the library's, eos after each document.
TEST_F(DataCli, PrepareWithASentencePieceModelWritesAMegatronPair) {
  const std::string model = kSourceDir + "/tests/tokenizer_fixtures/sentencepiece.model";
  const std::vector<std::string> documents = {"Hello world, this is a test.", "Another line of text here."};
  const std::string in = write("a.txt", documents[0]);
  write("b.txt", documents[1]);
  const auto prepared = axonn("data prepare " + in + " " + path("b.txt") + " --tokenizer " + model +
                              " --output-format megatron -o " + path("sp"));
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  EXPECT_TRUE(contains(prepared.output, "in 2 documents (Megatron indexed dataset (uint16))")) << prepared.output;
  const std::unique_ptr<axonn::Tokenizer> sp = axonn::load_tokenizer(model);
  std::vector<int32_t> want;
  for (const std::string& d : documents) {
    const std::vector<int32_t> ids = sp->encode(d);
    want.insert(want.end(), ids.begin(), ids.end());
    want.push_back(*sp->end_of_document());
  }
  const axonn::TokenData data = axonn::TokenData::load({path("sp"), "megatron"});
  std::vector<int32_t> got(static_cast<size_t>(data.size()));
  data.copy(0, data.size(), got.data());
  EXPECT_EQ(got, want);
  const auto info = axonn("data info " + path("sp"));
  EXPECT_EQ(info.code, 0) << info.output;
  EXPECT_TRUE(contains(info.output, "tokens:   " + std::to_string(want.size()))) << info.output;
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
  EXPECT_TRUE(contains(missing.output, "axonn data: input '" + path("nope.txt") + "' does not exist"))
      << missing.output;
  EXPECT_FALSE(fs::exists(path("x.bin")));

  const auto empty = axonn("data prepare " + write("empty.txt", "") + " -o " + path("x.bin"));
  EXPECT_EQ(empty.code, 2) << empty.output;
  EXPECT_TRUE(contains(empty.output, "refusing to write '" + path("x.bin") + "' with no tokens")) << empty.output;
  EXPECT_FALSE(fs::exists(path("x.bin")));

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

  const auto bad_line = axonn("data prepare " + write("d.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n") +
                              " -o " + path("x.bin"));
  EXPECT_EQ(bad_line.code, 2) << bad_line.output;
  EXPECT_TRUE(contains(bad_line.output, path("d.jsonl") + ":2: the object has no \"text\" member")) << bad_line.output;
  EXPECT_FALSE(fs::exists(path("x.bin")));

  const auto past_the_end = axonn("data decode " + path("a.txt") + " --sequence 1 --sample 2");
  EXPECT_EQ(past_the_end.code, 2) << past_the_end.output;
  EXPECT_TRUE(contains(past_the_end.output, "holds 2 samples of sequence 1; --sample 2 is past the last (1)"))
      << past_the_end.output;

  EXPECT_EQ(axonn("data frobnicate").code, 2);
  EXPECT_EQ(axonn("data").code, 2);
  EXPECT_EQ(axonn("data info --sequence zero").code, 2);
  EXPECT_EQ(axonn("data --help").code, 0);
}

}  // namespace
