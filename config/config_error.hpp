#pragma once
// A bad site or job config. what() starts with "file:line:column: " (or "file: " when
// the value has no position, e.g. a command-line override) and names the allowed values.
// Exit code 2: nothing was started.
#include <string>

#include "core/error.hpp"
#include "core/printable.hpp"

namespace axonn {

class ConfigError : public Error {
 public:
  // Messages quote what the file or the command line says; control characters in it (a TOML
  // "\u0000" or "\n" escape, a tab in an override) are shown as \xNN, so the message stays
  // one line and a NUL cannot cut what() short.
  explicit ConfigError(const std::string& message) : Error(escape_controls(message), exit_code::bad_input) {}
};

}  // namespace axonn
