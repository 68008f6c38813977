#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/bias.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/column_sums.hpp"
#include "trainer/cuda/device_math.cuh"

namespace axonn::cuda {
namespace {
template <typename T>
__global__ void bias_forward_kernel(T* out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  const int64_t total = m * n;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t i = idx / n, j = idx - i * n;
    T* o = out + i * ld + j;
    store(o, load(o) + bias[j]);
  }
}

}  // namespace

void bias_forward(const Context& ctx, ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  op_checks::require_bias_shape("bias_forward", m, n, ld);
  if (m == 0 || n == 0) return;
  with_storage(out.type(), [&](auto t) {
    using T = decltype(t);
    bias_forward_kernel<T><<<grid_for(m * n), kThreads, 0, ctx.stream>>>(typed<T>(out), bias, m, n, ld);
  });
  check_launch(ctx, "bias_forward");
}

void bias_backward(const Context& ctx, float* dbias, ConstActPtr dout, int64_t m, int64_t n, int64_t ld) {
  op_checks::require_bias_shape("bias_backward", m, n, ld);
  if (m == 0 || n == 0) return;
  const int64_t chunks = column_chunks(m);
  auto* partials = static_cast<float*>(
      ctx.scratch->get(ctx.stream, static_cast<size_t>(chunks * n) * sizeof(float), "bias_backward"));
  column_chunk_sums(ctx, "bias_backward", partials, dout, m, n, ld);
  add_column_partials(ctx, "bias_backward", dbias, partials, chunks, n);
}

}  // namespace axonn::cuda
