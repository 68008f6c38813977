// `axonn data prepare`'s parts without a process: the documents it reads (files, folders,
// JSON Lines), the streaming llm.c writer, and the parallel pipeline whose output must not
// depend on the thread count.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data_error.hpp"
#include "runner/prepare/documents.hpp"
#include "runner/prepare/prepare_pipeline.hpp"
#include "runner/prepare/progress_line.hpp"
#include "runner/tokenize/tokenizer.hpp"
#include "scratch_dir.hpp"
#include "trainer/data/llmc_writer.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn;
using axonn::test::expect_data_error;

class Prepare : public axonn::test::ScratchDirTest {};

std::vector<std::string> read_all(DocumentReader& reader, int64_t batch_bytes) {
  std::vector<std::string> all, batch;
  while (reader.next_batch(batch, batch_bytes)) all.insert(all.end(), batch.begin(), batch.end());
  EXPECT_TRUE(batch.empty());
  return all;
}

// One id per byte and an end-of-document id after them (256): enough to see the order of
// documents and where each ends. `fail_on` makes encode throw on that text.
class BytesWithSeparator final : public Tokenizer {
 public:
  explicit BytesWithSeparator(std::string fail_on = "") : fail_on_(std::move(fail_on)) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    if (!fail_on_.empty() && text == fail_on_) throw DataError("cannot encode '" + fail_on_ + "'");
    std::vector<int32_t> ids;
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (const int32_t id : ids) text.push_back(static_cast<char>(id));
    return text;
  }
  int64_t vocab_size() const override { return 257; }
  std::optional<int32_t> end_of_document() const override { return 256; }
  std::string description() const override { return "bytes and a separator"; }

 private:
  std::string fail_on_;
};

// ---- documents ------------------------------------------------------------------------------

TEST_F(Prepare, FoldersExpandToTheirFilesInPathOrderWithoutHiddenOnes) {
  fs::create_directories(path("corpus/b"));
  fs::create_directories(path("corpus/.git"));
  write("corpus/b/2.txt", "two");
  write("corpus/a.jsonl", "{\"text\": \"one\"}\n");
  write("corpus/c.ndjson", "{\"text\": \"three\"}\n");
  write("corpus/.hidden.txt", "no");
  write("corpus/.git/config", "no");
  const std::string single = write("first.txt", "zero");

  const std::vector<InputFile> files = list_inputs({single, path("corpus")});
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].path, single);
  EXPECT_EQ(files[1].path, path("corpus/a.jsonl"));
  EXPECT_EQ(files[2].path, path("corpus/b/2.txt"));
  EXPECT_EQ(files[3].path, path("corpus/c.ndjson"));
  EXPECT_EQ(files[0].kind, InputKind::text);
  EXPECT_EQ(files[1].kind, InputKind::json_lines);
  EXPECT_EQ(files[3].kind, InputKind::json_lines);
  EXPECT_EQ(files[2].bytes, 3);

  DocumentReader reader(files, "text");
  EXPECT_EQ(read_all(reader, 1), (std::vector<std::string>{"zero", "one", "two", "three"}));
  EXPECT_EQ(reader.bytes_read(), reader.bytes_total());
}

TEST_F(Prepare, MissingOrEmptyInputsAreNamed) {
  expect_data_error([&] { list_inputs({path("nope.txt")}); }, {"input '" + path("nope.txt") + "' does not exist"});
  fs::create_directories(path("empty/.only-hidden"));
  expect_data_error([&] { list_inputs({path("empty")}); }, {"folder '" + path("empty") + "' holds no files"});
  expect_data_error([&] { list_inputs({}); }, {"no input files"});
}

TEST_F(Prepare, JsonLinesTakeTheNamedFieldAndSkipBlankLines) {
  const std::string f = write("docs.jsonl",
                              "{\"id\": 1, \"content\": \"caf\\u00e9 \\ud83d\\ude00\\n\\ttab\"}\n"
                              "\n"
                              "   \r\n"
                              "{\"content\": \"\", \"meta\": {\"x\": [1, 2]}}\n"
                              "{\"content\": \"last, no newline\"}");
  DocumentReader reader(list_inputs({f}), "content");
  EXPECT_EQ(read_all(reader, 1 << 20),
            (std::vector<std::string>{"caf\xc3\xa9 \xf0\x9f\x98\x80\n\ttab", "", "last, no newline"}));
}

TEST_F(Prepare, BadJsonLinesNameTheFileTheLineAndTheFix) {
  expect_data_error([] { json_lines_document("{\"text\": 1", "text", "d.jsonl:7"); },
                    {"d.jsonl:7: not a JSON value", "one JSON object a line"});
  expect_data_error([] { json_lines_document("[\"text\"]", "text", "d.jsonl:2"); },
                    {"d.jsonl:2: an array, not an object"});
  expect_data_error([] { json_lines_document("{\"body\": \"x\"}", "text", "d.jsonl:3"); },
                    {"d.jsonl:3: the object has no \"text\" member", "--field"});
  expect_data_error([] { json_lines_document("{\"text\": null}", "text", "d.jsonl:4"); },
                    {"d.jsonl:4: \"text\" is null, not a string"});

  const std::string f = write("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"cut\n");
  DocumentReader reader(list_inputs({f}), "text");
  expect_data_error([&] { read_all(reader, 1 << 20); }, {f + ":2: not a JSON value"});
}

// ---- the llm.c writer -----------------------------------------------------------------------

TEST_F(Prepare, LlmcWriterPicksTheIdWidthFromTheVocabulary) {
  LlmcWriter small(path("gpt2.bin"), 50257);
  small.add_document(std::vector<int32_t>{50256, 0, 65});
  small.add_document(std::vector<int32_t>{7});
  EXPECT_EQ(small.description(), "llm.c tokens (uint16)");
  small.finish();
  const TokenFile gpt2 = read_token_file(path("gpt2.bin"), "tokens");
  EXPECT_EQ(gpt2.format, "llm.c tokens");
  EXPECT_EQ(gpt2.tokens, (std::vector<int32_t>{50256, 0, 65, 7}));

  LlmcWriter large(path("llama.bin"), 128256);
  large.add_document(std::vector<int32_t>{128000, 9906, 128255});
  large.finish();
  const TokenFile llama = read_token_file(path("llama.bin"), "tokens");
  EXPECT_EQ(llama.format, "llm.c llama-3 tokens");
  EXPECT_EQ(llama.tokens, (std::vector<int32_t>{128000, 9906, 128255}));
  EXPECT_EQ(fs::file_size(path("llama.bin")), 1024u + 3 * 4);
}

TEST_F(Prepare, LlmcWriterLeavesNothingBehindOnABadIdOrWhenUnfinished) {
  {
    LlmcWriter writer(path("bad.bin"), 1000);
    writer.add_document(std::vector<int32_t>{1, 2});
    expect_data_error([&] { writer.add_document(std::vector<int32_t>{3, 1000}); },
                      {"token id 1000 at position 3", "[0, 1000)", path("bad.bin")});
  }
  {
    LlmcWriter writer(path("empty.bin"), 256);
    expect_data_error([&] { writer.finish(); }, {"with no tokens"});
  }
  // Neither the final names nor a temporary file remain.
  EXPECT_TRUE(fs::is_empty(dir_));
}

// ---- the pipeline ---------------------------------------------------------------------------

std::vector<int32_t> prepare_with(const std::vector<InputFile>& files, int threads, int64_t batch_bytes,
                                  const std::string& out, PrepareProgress* totals = nullptr) {
  DocumentReader reader(files, "text");
  LlmcWriter sink(out, 257);
  PrepareOptions options;
  options.threads = threads;
  options.batch_bytes = batch_bytes;
  int calls = 0;
  options.on_progress = [&](const PrepareProgress&) { ++calls; };
  const PrepareProgress done = prepare_documents(reader, BytesWithSeparator(), sink, options);
  EXPECT_GE(calls, 1);
  if (totals != nullptr) *totals = done;
  return read_token_file(out, "tokens").tokens;
}

TEST_F(Prepare, OutputIsTheDocumentsInOrderWhateverTheThreadCount) {
  std::string lines;
  std::vector<int32_t> want;
  for (int i = 0; i < 300; ++i) {
    const std::string text = "document " + std::to_string(i) + std::string(static_cast<size_t>(i % 17), 'x');
    lines += "{\"text\": \"" + text + "\"}\n";
    for (const char c : text) want.push_back(static_cast<unsigned char>(c));
    want.push_back(256);
    if (i % 50 == 0) lines += "{\"text\": \"\"}\n";  // empty documents add nothing, not even a separator
  }
  const std::vector<InputFile> files = list_inputs({write("a.jsonl", lines), write("b.txt", "tail")});
  for (const char c : std::string("tail")) want.push_back(static_cast<unsigned char>(c));
  want.push_back(256);

  PrepareProgress totals;
  EXPECT_EQ(prepare_with(files, 1, 1 << 20, path("one.bin"), &totals), want);
  EXPECT_EQ(totals.documents, 301);
  EXPECT_EQ(totals.tokens, static_cast<int64_t>(want.size()));
  EXPECT_EQ(totals.bytes_read, totals.bytes_total);
  // Tiny batches: many rounds of four threads, each round's batches encoded out of order.
  EXPECT_EQ(prepare_with(files, 4, 64, path("four.bin")), want);
}

TEST_F(Prepare, AnEncodingErrorStopsThePipelineAndWritesNothing) {
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "{\"text\": \"doc " + std::to_string(i) + "\"}\n";
  DocumentReader reader(list_inputs({write("a.jsonl", lines)}), "text");
  LlmcWriter sink(path("out.bin"), 257);
  PrepareOptions options;
  options.threads = 3;
  options.batch_bytes = 16;
  expect_data_error([&] { prepare_documents(reader, BytesWithSeparator("doc 42"), sink, options); },
                    {"cannot encode 'doc 42'"});
  EXPECT_FALSE(fs::exists(path("out.bin")));
}

TEST(PrepareProgressLine, SaysDocumentsTokensRatePercentAndTimeLeft) {
  PrepareProgress p;
  p.documents = 1234567;
  p.tokens = 3456789;
  p.bytes_read = 25'000'000;
  p.bytes_total = 100'000'000;
  p.seconds = 2.0;
  EXPECT_EQ(format_progress(p), "1,234,567 documents, 3.46M tokens, 12.5 MB/s, 25%, ETA 0:00:06");
  p.bytes_read = p.bytes_total;
  p.documents = 12;
  p.tokens = 999;
  EXPECT_EQ(format_progress(p), "12 documents, 999 tokens, 50.0 MB/s, 100%");
}

}  // namespace
