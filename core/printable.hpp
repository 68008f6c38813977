#pragma once
// Untrusted text (a TOML value, a file's bytes, an environment variable) as errors quote it:
// one line, a NUL does not cut the message short, a binary file does not flood a terminal.
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace axonn {

namespace printable_detail {
inline void append_hex(std::string& out, unsigned char byte) {
  char hex[5];
  std::snprintf(hex, sizeof hex, "\\x%02x", byte);
  out += hex;
}
}  // namespace printable_detail

// `text` with each control byte (below 0x20, and 0x7f) shown as \xNN; everything else as is,
// so UTF-8 in a name or a value a user wrote stays readable.
inline std::string escape_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b != 0x7f)
      out += c;
    else
      printable_detail::append_hex(out, b);
  }
  return out;
}

// A file's bytes that should have been text: printable ASCII as is, a backslash and every
// other byte as \xNN (so the excerpt is unambiguous whatever the file holds), at most
// `max_bytes` of `text`, then how many bytes it has in all.
inline std::string escaped_excerpt(std::string_view text, size_t max_bytes) {
  std::string out;
  for (char c : text.substr(0, max_bytes)) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f && b != '\\')
      out += c;
    else
      printable_detail::append_hex(out, b);
  }
  if (text.size() > max_bytes) out += "... (" + std::to_string(text.size()) + " bytes in all)";
  return out;
}

}  // namespace axonn
