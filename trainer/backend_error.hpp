#pragma once
#include <stdexcept>

#include "core/error.hpp"

namespace axonn {

// A bad argument to a backend op (negative size, width larger than the full width, an
// element type the backend does not compute in, ...) or a failed allocation; the message
// names the op and the value.
class BackendError : public Error {
 public:
  explicit BackendError(const std::string& message) : Error(message, exit_code::failure) {}
};

}  // namespace axonn
