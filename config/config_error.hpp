#pragma once
// A bad site or job config. what() starts with "file:line:column: " (or "file: " when
// the value has no position, e.g. a command-line override) and names the allowed values.
#include <cstdio>
#include <stdexcept>
#include <string>

namespace axonn {

class ConfigError : public std::runtime_error {
 public:
  // Messages quote what the file or the command line says; control characters in it (a TOML
  // "\u0000" or "\n" escape, a tab in an override) are shown as \xNN, so the message stays
  // one line and a NUL cannot cut what() short.
  explicit ConfigError(const std::string& message) : std::runtime_error(escape_controls(message)) {}

 private:
  static std::string escape_controls(const std::string& text) {
    std::string out;
    for (char c : text) {
      const auto b = static_cast<unsigned char>(c);
      if (b >= 0x20 && b != 0x7f) {
        out += c;
      } else {
        char hex[5];
        std::snprintf(hex, sizeof hex, "\\x%02x", b);
        out += hex;
      }
    }
    return out;
  }
};

}  // namespace axonn
