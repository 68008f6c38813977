#include "runner/cli/environment.hpp"

#include <cstdlib>

namespace axonn {

std::optional<std::string> environment(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace axonn
