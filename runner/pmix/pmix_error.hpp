#pragma once
// The one exception type of axonn_pmix: a PMIx call that failed (naming the call and
// PMIx_Error_string of its status) or a PMIx environment that cannot work (no server,
// a key the server does not provide), with what to do about it.
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace axonn {

class PmixError : public Error {
 public:
  // A problem that is not one call's status (no server in the environment, a missing key).
  explicit PmixError(const std::string& message) : Error(message, exit_code::failure) {}
  // `call` returned `status`: "<call> failed: <PMIx_Error_string(status)> (<status>)[; hint]".
  PmixError(const std::string& call, int status, const std::string& hint = "");

  const std::string& call() const { return call_; }  // empty for the message-only form
  int status() const { return status_; }              // a pmix_status_t; 0 for the message-only form

 private:
  std::string call_;
  int status_ = 0;
};

// Throws PmixError(call, status) unless status is PMIX_SUCCESS (or, where `done_ok`,
// PMIX_OPERATION_SUCCEEDED, which non-blocking calls return when they finished at once).
void pmix_check(int status, const std::string& call, bool done_ok = false);

}  // namespace axonn
