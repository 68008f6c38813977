#include "trainer/cpu/gelu.hpp"

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

void gelu_forward(float* out, const float* x, int64_t n) {
  require_nonnegative("gelu_forward", "n", n);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    out[i] = v * sigmoid_approx(2.0f * u);
  }
}

void gelu_backward(float* dx, const float* x, const float* dout, int64_t n) {
  require_nonnegative("gelu_backward", "n", n);
  // d/dx [x·σ(2u)] = σ + x·σ·(1 − σ)·2·du/dx, du/dx = sqrt(2/π)·(1 + 3·0.044715·x²)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    const float s = sigmoid_approx(2.0f * u);
    dx[i] = dout[i] * (s + v * s * (1.0f - s) * 2.0f * du);
  }
}

}  // namespace axonn::cpu
