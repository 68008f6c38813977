#pragma once
#include <stdexcept>

namespace axonn {

// A bad argument to a backend op (negative size, width larger than the full width, an
// element type the backend does not compute in, ...) or a failed allocation; the message
// names the op and the value.
class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace axonn
