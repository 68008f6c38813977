#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/reductions.hpp"

namespace axonn::cuda {
namespace {

constexpr int kFinishThreads = 1024;

// partials[block] = Σ x (or x²) over the block's kSumChunk elements.
__global__ void chunk_sums_kernel(double* partials, const float* x, int64_t n, bool squares) {
  __shared__ float shared[kWarpSize];
  const int64_t start = static_cast<int64_t>(blockIdx.x) * kSumChunk;
  const int64_t end = start + kSumChunk < n ? start + kSumChunk : n;
  float s = 0.0f;
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    const float v = x[i];
    s += squares ? v * v : v;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = static_cast<double>(s);
}

// One block: out[0] += Σ partials, in double, rounded once.
__global__ void finish_sum_kernel(float* out, const double* partials, int64_t count) {
  __shared__ double shared[kWarpSize];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) out[0] = static_cast<float>(static_cast<double>(out[0]) + s);
}

void reduce(const Context& ctx, const char* op, float* out, const float* x, int64_t n, bool squares) {
  require_nonnegative(op, "n", n);
  if (n == 0) return;  // out[0] + 0 is out[0]
  const int64_t blocks = (n + kSumChunk - 1) / kSumChunk;
  auto* partials = static_cast<double*>(ctx.scratch->get(ctx.stream, static_cast<size_t>(blocks) * sizeof(double), op));
  chunk_sums_kernel<<<grid_dim(op, "blocks", blocks, true), kThreads, 0, ctx.stream>>>(partials, x, n, squares);
  check_launch(ctx, op);
  finish_sum_kernel<<<1, kFinishThreads, 0, ctx.stream>>>(out, partials, blocks);
  check_launch(ctx, op);
}

}  // namespace

void sum(const Context& ctx, float* out, const float* x, int64_t n) { reduce(ctx, "sum", out, x, n, false); }

void sum_squares(const Context& ctx, float* out, const float* x, int64_t n) {
  reduce(ctx, "sum_squares", out, x, n, true);
}

}  // namespace axonn::cuda
