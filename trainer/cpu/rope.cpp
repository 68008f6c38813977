#include "trainer/cpu/rope.hpp"

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"

namespace axonn::cpu {
namespace {

// Rows [begin, end) of the B·T token rows; sign +1 rotates by θ, −1 by −θ (sin negated,
// exactly: the same products either way).
AXONN_SIMD_CLONES void rotate_rows(float* x, const float* cos_sin, int64_t T, int64_t heads, int64_t d, int64_t ld,
                                   float sign, int64_t begin, int64_t end) {
  const int64_t half = d / 2;
  for (int64_t row = begin; row < end; ++row) {
    const float* cs = cos_sin + (row % T) * d;  // (d/2, 2) of this token's position
    for (int64_t head = 0; head < heads; ++head) {
      float* p = x + row * ld + head * d;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = sign * cs[2 * i + 1];
        const float x0 = p[2 * i], x1 = p[2 * i + 1];
        p[2 * i] = x0 * c - x1 * s;
        p[2 * i + 1] = x0 * s + x1 * c;
      }
    }
  }
}

void rotate(ThreadPool& pool, const char* op, float* x, const float* cos_sin, int64_t B, int64_t T, int64_t heads,
            int64_t d, int64_t ld, float sign) {
  op_checks::require_rope_shape(op, B, T, heads, d, ld);
  parallel_rows(pool, B * T, heads * d,
                [&](int64_t begin, int64_t end) { rotate_rows(x, cos_sin, T, heads, d, ld, sign, begin, end); });
}

}  // namespace

void rope_forward(ThreadPool& pool, float* x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                  int64_t ld) {
  rotate(pool, "rope_forward", x, cos_sin, B, T, heads, d, ld, 1.0f);
}

void rope_backward(ThreadPool& pool, float* dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                   int64_t ld) {
  rotate(pool, "rope_backward", dx, cos_sin, B, T, heads, d, ld, -1.0f);
}

}  // namespace axonn::cpu
