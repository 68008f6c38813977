#pragma once
// The error measure of the CUDA op tests (test_cuda_backend.cpp, test_cuda_bf16_storage.cpp):
// max|got − ref| / max(1, max|ref|), so a bound reads as a fraction of the output's scale.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace axonn::test {

// +inf where got is not finite and ref is not NaN (an element the op under test did not
// write: outputs start as NaN), or the sizes differ. Elements where ref is NaN are skipped.
inline double normalized_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double err = 0.0, scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref[i])) continue;
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  return err / scale;
}

}  // namespace axonn::test
