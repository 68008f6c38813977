#pragma once
// Code points as the pre-tokenizers see them: UTF-8 decoded with every invalid byte kept as a
// code point of its own (kInvalidByteBase + the byte: class `other`, never a letter, number or
// space), so that any bytes split into pieces that concatenate back to the same bytes; the
// character classes of the patterns (\p{L}, \p{N}, \s); and NFC.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace axonn::tokenize {

inline constexpr char32_t kInvalidByteBase = 0x110000;

enum class CharClass : uint8_t { letter, number, space, other };

CharClass char_class(char32_t cp);

// `text` as code points, and where each starts in it: offsets has one more entry than
// code_points (the end), so code point i is text[offsets[i], offsets[i+1]).
struct DecodedText {
  std::vector<char32_t> code_points;
  std::vector<uint32_t> offsets;
};
void decode_utf8(std::string_view text, DecodedText& out);

// Canonical composition (Unicode NFC) of `text`; invalid bytes stay as they are and block
// composition across them.
std::string nfc(std::string_view text);

}  // namespace axonn::tokenize
