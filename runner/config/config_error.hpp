#pragma once
// A bad site or job config. what() starts with "file:line:column: " (or "file: " when
// the value has no position, e.g. a command-line override) and names the allowed values.
#include <stdexcept>

namespace axonn {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace axonn
