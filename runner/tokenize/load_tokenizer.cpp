// load_tokenizer: which kind of file, by its first byte and its name.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/printable.hpp"
#include "runner/tokenize/bpe_tokenizer.hpp"
#include "runner/tokenize/sentencepiece_tokenizer.hpp"
#include "runner/tokenize/tokenizer.hpp"

namespace axonn {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path_or_folder) {
  // A model's folder (a Hugging Face download): its tokenizer.json, else its tokenizer.model.
  std::string path = path_or_folder;
  std::error_code ec;
  if (std::filesystem::is_directory(path_or_folder, ec)) {
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
      const std::filesystem::path candidate = std::filesystem::path(path_or_folder) / name;
      if (std::filesystem::is_regular_file(candidate, ec)) return load_tokenizer(candidate.string());
    }
    throw TokenizerError(escape_controls(path_or_folder) +
                         ": a folder without tokenizer.json or tokenizer.model: name the tokenizer file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw TokenizerError(escape_controls(path) + ": cannot open: name an existing tokenizer.json or SentencePiece .model");
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::string bytes = std::move(text).str();
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{') return load_bpe_tokenizer_json(bytes, escape_controls(path));
  if (path.size() > 6 && path.compare(path.size() - 6, 6, ".model") == 0) return load_sentencepiece_model(path);
  throw TokenizerError(escape_controls(path) +
                       ": neither a tokenizer.json (a JSON object) nor a SentencePiece model (a name ending in .model)");
}

}  // namespace axonn
