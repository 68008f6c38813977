#include "trainer/cpu/reductions.hpp"

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {

void sum(float* out, const float* x, int64_t n) {
  require_nonnegative("sum", "n", n);
  out[0] = static_cast<float>(static_cast<double>(out[0]) + sum_floats(x, n));
}

void sum_squares(float* out, const float* x, int64_t n) {
  require_nonnegative("sum_squares", "n", n);
  out[0] = static_cast<float>(static_cast<double>(out[0]) + sum_squares_floats(x, n));
}

}  // namespace axonn::cpu
