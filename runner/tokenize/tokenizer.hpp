#pragma once
// Tokenizers for `axonn data prepare` and `axonn data decode`: text to token ids and back.
//
//   std::unique_ptr<Tokenizer> t = load_tokenizer("llama3/tokenizer.json");  // TokenizerError
//   std::vector<int32_t> ids = t->encode(document);
//   if (auto eod = t->end_of_document()) ids.push_back(*eod);  // between documents
//   std::string text = t->decode(ids);
//
// Supported (docs/data.md, "Tokenizers"): Hugging Face tokenizer.json byte-level BPE as
// GPT-2, Llama 3 and Qwen 2 ship it (bpe_tokenizer.hpp), SentencePiece .model files through
// libsentencepiece (Llama 2, Mistral), and one token per byte (ByteTokenizer). encode adds no
// BOS or EOS. Every method is const and safe to call from several threads at once.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace axonn {

// A tokenizer file axonn cannot load exactly, or an id decode cannot map. Exit code 2 (bad
// input); the message names the file, the field (a JSON path such as `normalizer.type`), the
// value, and what to do.
class TokenizerError : public Error {
 public:
  explicit TokenizerError(const std::string& message) : Error(message, exit_code::bad_input) {}
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Ordinary text, any bytes. Special tokens written in the text (`<|endoftext|>`) become
  // their ids, as Hugging Face tokenizers' encode does by default; SentencePiece matches only
  // its user-defined symbols, never <s> or </s>.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The text of `ids`, special tokens included; TokenizerError for an id with no token.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The largest id + 1, added tokens included: the smallest vocabulary a model needs.
  virtual int64_t vocab_size() const = 0;
  // The id put between documents (GPT-2 <|endoftext|>, Llama 3 <|end_of_text|>,
  // SentencePiece's eos), or nothing.
  virtual std::optional<int32_t> end_of_document() const = 0;
  // One line: "tokenizer.json: byte-level BPE, 128256 ids, Llama 3 pre-tokenizer".
  virtual std::string description() const = 0;
};

// One id per byte (vocabulary 256, no end of document): what `axonn data prepare` did before
// tokenizers.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::optional<int32_t> end_of_document() const override { return std::nullopt; }
  std::string description() const override { return "bytes: one token per byte, 256 ids"; }
};

// A Hugging Face tokenizer.json (a file whose first non-blank byte is `{`), a SentencePiece
// model (a name ending in .model), or a model's folder holding tokenizer.json (first) or
// tokenizer.model; TokenizerError naming the file otherwise. Loading Llama 3's takes ~0.5 s.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path_or_folder);

}  // namespace axonn
