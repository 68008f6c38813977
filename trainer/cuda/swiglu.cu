#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/swiglu.hpp"

namespace axonn::cuda {
namespace {

// 1 / (1 + e^-x): 0 for very negative x (e^-x = inf), 1 for large x.
__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Element (i, j) of out (m, f) reads gate_up[i·2f + j] and gate_up[i·2f + f + j].
template <typename T>
__global__ void forward_kernel(T* out, const T* gate_up, int64_t m, int64_t f) {
  const int64_t n = m * f;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t i = e / f, j = e - i * f;
    const float g = load(gate_up + i * 2 * f + j);
    store(out + e, g * sigmoid(g) * load(gate_up + i * 2 * f + f + j));
  }
}

template <typename T>
__global__ void backward_kernel(T* dgate_up, const T* gate_up, const T* dout, int64_t m, int64_t f) {
  const int64_t n = m * f;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t i = e / f, j = e - i * f, at = i * 2 * f + j;
    const float g = load(gate_up + at), up = load(gate_up + at + f), dy = load(dout + e);
    const float s = sigmoid(g);
    store(dgate_up + at, dy * up * (s * (1.0f + g * (1.0f - s))));
    store(dgate_up + at + f, dy * (g * s));
  }
}

}  // namespace

void swiglu_forward(const Context& ctx, ActPtr out, ConstActPtr gate_up, int64_t m, int64_t f) {
  const char* op = "swiglu_forward";
  op_checks::require_swiglu_shape(op, m, f);
  if (m == 0 || f == 0) return;
  with_storage(common_type(op, {out, gate_up}), [&](auto t) {
    using T = decltype(t);
    forward_kernel<T><<<grid_for(m * f), kThreads, 0, ctx.stream>>>(typed<T>(out), typed<T>(gate_up), m, f);
  });
  check_launch(ctx, op);
}

void swiglu_backward(const Context& ctx, ActPtr dgate_up, ConstActPtr gate_up, ConstActPtr dout, int64_t m, int64_t f) {
  const char* op = "swiglu_backward";
  op_checks::require_swiglu_shape(op, m, f);
  if (m == 0 || f == 0) return;
  with_storage(common_type(op, {dgate_up, gate_up, dout}), [&](auto t) {
    using T = decltype(t);
    backward_kernel<T>
        <<<grid_for(m * f), kThreads, 0, ctx.stream>>>(typed<T>(dgate_up), typed<T>(gate_up), typed<T>(dout), m, f);
  });
  check_launch(ctx, op);
}

}  // namespace axonn::cuda
