#pragma once
// The one place an exception becomes a line on stderr and the process's exit code.
#include <exception>
#include <string>

namespace axonn {

// "axonn <command>: <what>" and the error's own exit code for axonn's errors (core/error.hpp:
// they say what was wrong and what to do); anything else (a failed library call, a bug) is
// "axonn <command>: error: <what>" and exit code 1. `command` may be "ckpt inspect".
int report_error(const std::string& command, const std::exception& e);

}  // namespace axonn
