#pragma once
// axonn::Error: the base of every error axonn reports to a user (ConfigError, LayoutError,
// CheckpointError, CommError, BackendError, DataError, ...). It carries the exit code the
// `axonn` executable ends with; runner/cli/report_error.cpp is the one place that turns an
// exception into "axonn <command>: <what>" on stderr and that code. A subclass keeps its own
// structured fields (a file, a line, a tensor) and says which code it means.
#include <stdexcept>
#include <string>

#include "core/exit_codes.hpp"

namespace axonn {

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, int exit_code) : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace axonn
