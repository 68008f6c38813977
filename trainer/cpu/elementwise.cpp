#include "trainer/cpu/elementwise.hpp"

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

}  // namespace axonn::cpu
