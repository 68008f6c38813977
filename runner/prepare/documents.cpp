#include "runner/prepare/documents.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <utility>

#include "core/json_reader.hpp"
#include "trainer/data/token_data.hpp"

namespace axonn {
namespace fs = std::filesystem;
namespace {

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

InputKind kind_of(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".jsonl" || ext == ".ndjson" ? InputKind::json_lines : InputKind::text;
}

InputFile input_file(const fs::path& p) {
  std::error_code ec;
  const auto bytes = fs::file_size(p, ec);
  if (ec) throw DataError("cannot read the size of " + in_quotes(p.string()) + ": " + ec.message());
  return {p.string(), static_cast<int64_t>(bytes), kind_of(p)};
}

// Every regular file under `folder`, hidden entries skipped, sorted by path.
std::vector<InputFile> files_under(const fs::path& folder) {
  std::vector<fs::path> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, ec), end;
  if (ec) throw DataError("cannot list " + in_quotes(folder.string()) + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw DataError("cannot list " + in_quotes(folder.string()) + ": " + ec.message());
    if (hidden(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) found.push_back(it->path());
  }
  std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
  std::vector<InputFile> files;
  files.reserve(found.size());
  for (const fs::path& p : found) files.push_back(input_file(p));
  return files;
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

std::vector<InputFile> list_inputs(const std::vector<std::string>& paths) {
  std::vector<InputFile> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (fs::is_directory(status)) {
      std::vector<InputFile> under = files_under(path);
      if (under.empty()) throw DataError("folder " + in_quotes(path) + " holds no files to tokenize");
      files.insert(files.end(), std::make_move_iterator(under.begin()), std::make_move_iterator(under.end()));
    } else if (fs::is_regular_file(status)) {
      files.push_back(input_file(path));
    } else if (!fs::exists(status)) {
      throw DataError("input " + in_quotes(path) + " does not exist; name text or JSON Lines files, or folders of them");
    } else {
      throw DataError("input " + in_quotes(path) + " is neither a regular file nor a folder");
    }
  }
  if (files.empty()) throw DataError("no input files: name text or JSON Lines files, or folders of them");
  return files;
}

std::string json_lines_document(std::string_view line, const std::string& field, const std::string& where) {
  JsonValue value;
  try {
    value = parse_json(line);
  } catch (const JsonError& e) {
    throw DataError(where + ": not a JSON value (" + e.what() + "); JSON Lines holds one JSON object a line");
  }
  if (!value.is_object())
    throw DataError(where + ": " + value.type_name() + ", not an object; JSON Lines for data prepare holds one " +
                    "object a line with the document in its \"" + field + "\" member");
  const JsonValue* text = value.find(field);
  if (text == nullptr)
    throw DataError(where + ": the object has no \"" + field + "\" member; name the member that holds the text with " +
                    "--field");
  if (!text->is_string())
    throw DataError(where + ": \"" + field + "\" is " + text->type_name() + ", not a string");
  return text->string();
}

DocumentReader::DocumentReader(std::vector<InputFile> files, std::string field)
    : files_(std::move(files)), field_(std::move(field)) {
  for (const InputFile& f : files_) bytes_total_ += f.bytes;
}

bool DocumentReader::next_document(std::string& document) {
  for (;;) {
    if (lines_.is_open()) {
      std::string line;
      if (std::getline(lines_, line)) {
        ++line_number_;
        bytes_read_ += static_cast<int64_t>(line.size()) + 1;
        if (blank(line)) continue;
        document = json_lines_document(line, field_, lines_path_ + ":" + std::to_string(line_number_));
        return true;
      }
      if (lines_.bad()) throw DataError("cannot read " + in_quotes(lines_path_) + ": " + std::strerror(errno));
      lines_.close();
    }
    if (next_file_ == files_.size()) return false;
    const InputFile& file = files_[next_file_++];
    if (file.kind == InputKind::json_lines) {
      lines_.open(file.path, std::ios::binary);
      if (!lines_) throw DataError("cannot open " + in_quotes(file.path) + ": " + std::strerror(errno));
      lines_path_ = file.path;
      line_number_ = 0;
      continue;
    }
    std::ifstream in(file.path, std::ios::binary);
    if (!in) throw DataError("cannot open " + in_quotes(file.path) + ": " + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw DataError("cannot read " + in_quotes(file.path) + ": " + std::strerror(errno));
    document = std::move(text).str();
    bytes_read_ += static_cast<int64_t>(document.size());
    return true;
  }
}

bool DocumentReader::next_batch(std::vector<std::string>& out, int64_t max_bytes) {
  out.clear();
  int64_t bytes = 0;
  std::string document;
  while (bytes < max_bytes && next_document(document)) {
    bytes += static_cast<int64_t>(document.size());
    out.push_back(std::move(document));
    document.clear();
  }
  return !out.empty();
}

}  // namespace axonn
