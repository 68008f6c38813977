#pragma once
// Numbers in reports and messages: one double as a printf format writes it, a size in bytes,
// bytes in MiB, and a cell right-aligned in a column of a text table.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace axonn {

// `value` as `format` (one conversion of a double, e.g. "%.3g GB/s") writes it; at most 63
// characters, which every format used for a number fits.
inline std::string format_number(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

// Bytes in MiB, for messages that print a fraction of one ("%.2f MiB").
inline double in_mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// A message size rounded to whole KiB below a MiB and whole MiB from there: "192 KiB", "4 MiB".
inline std::string bytes_text(double bytes) {
  return bytes >= 1024.0 * 1024 ? format_number("%.0f MiB", bytes / (1024.0 * 1024))
                                : format_number("%.0f KiB", bytes / 1024.0);
}

// `text` right-aligned in a column `width` wide; as is when it is wider.
inline std::string pad_left(std::string text, size_t width) {
  if (text.size() < width) text.insert(0, width - text.size(), ' ');
  return text;
}

}  // namespace axonn
