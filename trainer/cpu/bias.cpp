#include "trainer/cpu/bias.hpp"

#include "trainer/cpu/check.hpp"

namespace axonn::cpu {

void bias_forward(float* out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  require_nonnegative("bias_forward", "m", m);
  require_nonnegative("bias_forward", "n", n);
  require_at_most("bias_forward", "n", n, "row stride ld", ld);
  for (int64_t i = 0; i < m; ++i) {
    float* row = out + i * ld;
    for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
  }
}

void bias_backward(float* dbias, const float* dout, int64_t m, int64_t n, int64_t ld) {
  require_nonnegative("bias_backward", "m", m);
  require_nonnegative("bias_backward", "n", n);
  require_at_most("bias_backward", "n", n, "row stride ld", ld);
  // Row by row, so the inner loop runs along contiguous memory (vectorized over columns).
  for (int64_t i = 0; i < m; ++i) {
    const float* row = dout + i * ld;
    for (int64_t j = 0; j < n; ++j) dbias[j] += row[j];
  }
}

}  // namespace axonn::cpu
