// ByteTokenizer: one id per byte, what `axonn data prepare` did before tokenizers.
#include <string>

#include "runner/tokenize/tokenizer.hpp"

namespace axonn {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id > 255) {
      throw TokenizerError("bytes: no token has id " + std::to_string(id) + " (ids run from 0 to 255)");
    }
    out.push_back(static_cast<char>(id));
  }
  return out;
}

}  // namespace axonn
