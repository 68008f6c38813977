#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/gelu.hpp"

namespace axonn::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// 1 / (1 + e^-x): 0 for very negative x (e^-x = inf), 1 for large x.
__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T>
__global__ void forward_kernel(T* out, const T* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = load(x + i);
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    store(out + i, v * sigmoid(2.0f * u));
  }
}

// d/dx [x·σ(2u)] = σ + x·σ·(1 − σ)·2·du/dx, du/dx = sqrt(2/π)·(1 + 3·0.044715·x²)
template <typename T>
__global__ void backward_kernel(T* dx, const T* x, const T* dout, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = load(x + i);
    const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    const float s = sigmoid(2.0f * u);
    store(dx + i, load(dout + i) * (s + v * s * (1.0f - s) * 2.0f * du));
  }
}

}  // namespace

void gelu_forward(const Context& ctx, ActPtr out, ConstActPtr x, int64_t n) {
  require_nonnegative("gelu_forward", "n", n);
  if (n == 0) return;
  with_storage(common_type("gelu_forward", {out, x}), [&](auto t) {
    using T = decltype(t);
    forward_kernel<T><<<grid_for(n), kThreads, 0, ctx.stream>>>(typed<T>(out), typed<T>(x), n);
  });
  check_launch(ctx, "gelu_forward");
}

void gelu_backward(const Context& ctx, ActPtr dx, ConstActPtr x, ConstActPtr dout, int64_t n) {
  require_nonnegative("gelu_backward", "n", n);
  if (n == 0) return;
  with_storage(common_type("gelu_backward", {dx, x, dout}), [&](auto t) {
    using T = decltype(t);
    backward_kernel<T><<<grid_for(n), kThreads, 0, ctx.stream>>>(typed<T>(dx), typed<T>(x), typed<T>(dout), n);
  });
  check_launch(ctx, "gelu_backward");
}

}  // namespace axonn::cuda
