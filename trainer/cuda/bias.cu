#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/bias.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/column_sums.hpp"
#include "trainer/cuda/device_math.cuh"

namespace axonn::cuda {
namespace {
// Rows over blocks in y (grid-stride), a row's columns over the threads in x: each element's
// row and column come from the indices, with no 64-bit division per element (a flat index
// divided by n cost this memory-bound kernel about as long as the GEMM it follows, bench_ops_gpu
// "+bias krn"). The same add per element as before: the same bits.
template <typename T>
__global__ void bias_forward_kernel(T* out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  for (int64_t i = blockIdx.y; i < m; i += gridDim.y)
    for (int64_t j = global_thread(); j < n; j += grid_threads()) {
      T* o = out + i * ld + j;
      store(o, load(o) + bias[j]);
    }
}

constexpr int64_t kMaxGridY = 65535;

}  // namespace

void bias_forward(const Context& ctx, ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  op_checks::require_bias_shape("bias_forward", m, n, ld);
  if (m == 0 || n == 0) return;
  with_storage(out.type(), [&](auto t) {
    using T = decltype(t);
    const dim3 grid(grid_for(n), static_cast<unsigned>(m < kMaxGridY ? m : kMaxGridY));
    bias_forward_kernel<T><<<grid, kThreads, 0, ctx.stream>>>(typed<T>(out), bias, m, n, ld);
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
