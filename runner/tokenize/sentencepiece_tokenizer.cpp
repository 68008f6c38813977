#include "runner/tokenize/sentencepiece_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <vector>

#include "core/printable.hpp"

namespace axonn {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : file_(path) {
    const auto status = sp_.Load(path);
    if (!status.ok()) {
      std::string m = path;
      m.append(": not a SentencePiece model (libsentencepiece: ");
      m.append(escaped_excerpt(status.ToString(), 200));
      m.append("): name a tokenizer.json or a SentencePiece .model such as Llama 2's tokenizer.model");
      throw TokenizerError(m);
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(std::string(text), &ids);
    if (!status.ok()) fail("cannot encode", status.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    for (int id : v) {
      if (id < 0 || id >= sp_.GetPieceSize()) {
        fail("no token has id " + std::to_string(id), "ids run from 0 to " + std::to_string(sp_.GetPieceSize() - 1));
      }
    }
    std::string out;
    const auto status = sp_.Decode(v, &out);
    if (!status.ok()) fail("cannot decode", status.ToString());
    return out;
  }

  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  std::optional<int32_t> end_of_document() const override {
    const int eos = sp_.eos_id();
    return eos >= 0 ? std::optional<int32_t>(eos) : std::nullopt;
  }
  std::string description() const override {
    std::string d = "SentencePiece model, ";
    d.append(std::to_string(sp_.GetPieceSize())).append(" ids");
    return d;
  }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& detail) const {
    std::string m = file_;
    m.append(": ").append(what).append(" (").append(escaped_excerpt(detail, 200)).append(")");
    throw TokenizerError(m);
  }

  std::string file_;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace axonn
