#pragma once
// The documents `axonn data prepare` tokenizes, read in one deterministic order.
//
// Inputs are files and folders; a folder stands for every regular file under it, recursively,
// in byte order of the path (hidden entries, whose names start with '.', skipped), so the
// same tree gives the same token stream on every machine. A file is
//   JSON Lines (".jsonl", ".ndjson"): one JSON object a line; its string member `field`
//     (default "text", as Megatron-LM's preprocess_data.py reads) is one document; empty
//     lines are skipped;
//   anything else: text, the whole file one document.
// Errors are DataError (exit 2) naming the file, the line and what to do.
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace axonn {

enum class InputKind { text, json_lines };

struct InputFile {
  std::string path;
  int64_t bytes = 0;
  InputKind kind = InputKind::text;
};

// The files `paths` stand for, in order (each folder expanded as above). Throws DataError for
// a path that does not exist or is neither a file nor a folder, and for no files at all.
std::vector<InputFile> list_inputs(const std::vector<std::string>& paths);

// The document on one JSON Lines line: the string member `field` of the object. `where` is
// "file:line" for messages. Throws DataError for malformed JSON, a line that is not an
// object, and a member that is absent or not a string.
std::string json_lines_document(std::string_view line, const std::string& field, const std::string& where);

// Reads the documents of `files` in order, a batch at a time.
class DocumentReader {
 public:
  DocumentReader(std::vector<InputFile> files, std::string field);

  // Replaces `out` with the next documents, at least one and about `max_bytes` of text
  // (a document is never split). Returns false, with `out` empty, after the last document.
  bool next_batch(std::vector<std::string>& out, int64_t max_bytes);

  // Bytes of input consumed so far (JSON syntax included): the progress bar's measure.
  int64_t bytes_read() const { return bytes_read_; }
  // Sum of the input files' sizes.
  int64_t bytes_total() const { return bytes_total_; }

 private:
  // The next document of the current or a later file; false after the last file.
  bool next_document(std::string& document);

  std::vector<InputFile> files_;
  std::string field_;
  size_t next_file_ = 0;
  std::ifstream lines_;  // the JSON Lines file being read, if any
  std::string lines_path_;
  int64_t line_number_ = 0;
  int64_t bytes_read_ = 0;
  int64_t bytes_total_ = 0;
};

}  // namespace axonn
