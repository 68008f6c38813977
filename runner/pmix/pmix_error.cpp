#include "runner/pmix/pmix_error.hpp"

#include <pmix.h>

namespace axonn {
namespace {

std::string describe_failure(const std::string& call, int status, const std::string& hint) {
  std::string text = call + " failed: " + PMIx_Error_string(status) + " (" + std::to_string(status) + ")";
  if (!hint.empty()) text += "; " + hint;
  return text;
}

}  // namespace

PmixError::PmixError(const std::string& call, int status, const std::string& hint)
    : Error(describe_failure(call, status, hint), exit_code::failure), call_(call), status_(status) {}

void pmix_check(int status, const std::string& call, bool done_ok) {
  if (status == PMIX_SUCCESS || (done_ok && status == PMIX_OPERATION_SUCCEEDED)) return;
  throw PmixError(call, status);
}

}  // namespace axonn
