#include "trainer/cpu/elementwise.hpp"

#include <algorithm>

#include "trainer/cpu/check.hpp"

namespace axonn::cpu {

void add(float* out, const float* a, const float* b, int64_t n) {
  require_nonnegative("add", "n", n);
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale(float* x, float alpha, int64_t n) {
  require_nonnegative("scale", "n", n);
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
  require_nonnegative("axpy", "n", n);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void fill(float* x, float value, int64_t n) {
  require_nonnegative("fill", "n", n);
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) {
  require_nonnegative("copy_2d", "rows", rows);
  require_nonnegative("copy_2d", "cols", cols);
  require_at_most("copy_2d", "cols", cols, "ld_dst", ld_dst);
  require_at_most("copy_2d", "cols", cols, "ld_src", ld_src);
  for (int64_t i = 0; i < rows; ++i) std::copy(src + i * ld_src, src + i * ld_src + cols, dst + i * ld_dst);
}

}  // namespace axonn::cpu
