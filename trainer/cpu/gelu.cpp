#include "trainer/cpu/gelu.hpp"

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

AXONN_SIMD_CLONES void forward_range(float* out, const float* x, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float v = x[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    out[i] = v * sigmoid_approx(2.0f * u);
  }
}

// d/dx [x·σ(2u)] = σ + x·σ·(1 − σ)·2·du/dx, du/dx = sqrt(2/π)·(1 + 3·0.044715·x²)
AXONN_SIMD_CLONES void backward_range(float* dx, const float* x, const float* dout, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float v = x[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    const float s = sigmoid_approx(2.0f * u);
    dx[i] = dout[i] * (s + v * s * (1.0f - s) * 2.0f * du);
  }
}

}  // namespace

void gelu_forward(ThreadPool& pool, float* out, const float* x, int64_t n) {
  require_nonnegative("gelu_forward", "n", n);
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { forward_range(out, x, begin, end); });
}

void gelu_backward(ThreadPool& pool, float* dx, const float* x, const float* dout, int64_t n) {
  require_nonnegative("gelu_backward", "n", n);
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { backward_range(dx, x, dout, begin, end); });
}

}  // namespace axonn::cpu
