#pragma once
// JSON scalars as text, for the files axonn writes by hand (summary.json, traces): a string
// literal with its quotes and escapes, and a number with enough digits to compare runs.
#include <cstdio>
#include <string>

namespace axonn {

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// %.9g: float32 values exactly, doubles to nine digits.
inline std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace axonn
