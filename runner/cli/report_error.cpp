#include "runner/cli/report_error.hpp"

#include <cstdio>

#include "core/error.hpp"

namespace axonn {

int report_error(const std::string& command, const std::exception& e) {
  const auto* known = dynamic_cast<const Error*>(&e);
  std::fprintf(stderr, "axonn %s: %s%s\n", command.c_str(), known != nullptr ? "" : "error: ", e.what());
  std::fflush(stderr);
  return known != nullptr ? known->exit_code() : exit_code::failure;
}

}  // namespace axonn
