#include "trainer/cuda/check.hpp"
#include "trainer/cuda/column_sums.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/layernorm.hpp"

namespace axonn::cuda {
namespace {
// The row kernels run one warp per row, kWarpsPerBlock rows per block; a warp whose row is
// past m returns as a whole (no lane is left out of a shuffle).
__device__ inline int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}
__device__ inline int lane() { return static_cast<int>(threadIdx.x % kWarpSize); }

unsigned row_blocks(const char* op, int64_t m) {
  return grid_dim(op, "row blocks", (m + kWarpsPerBlock - 1) / kWarpsPerBlock, true);
}

__global__ void row_sums_kernel(float* sums, const float* x, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float* row = x + i * c;
  float s = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) s += row[j];
  s = warp_sum(s);
  if (lane() == 0) sums[i] = s;
}

// x may alias a or b: each element is read and written by the same lane. The sum runs in
// row_sums_kernel's order, so the result equals add() then row_sums.
__global__ void residual_row_sums_kernel(float* x, float* sums, const float* a, const float* b, int64_t m,
                                         int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  float* row = x + i * c;
  const float* ra = a + i * c;
  const float* rb = b + i * c;
  float s = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) {
    const float v = ra[j] + rb[j];
    row[j] = v;
    s += v;
  }
  s = warp_sum(s);
  if (lane() == 0) sums[i] = s;
}

// mean may alias sums: every lane reads sums[i] before the shuffles, lane 0 writes after.
__global__ void centered_squares_kernel(float* mean, float* squares, const float* sums, const float* x, int64_t m,
                                        int64_t c, float inv_C) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float mu = sums[i] * inv_C;
  const float* row = x + i * c;
  float s = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) {
    const float dev = row[j] - mu;
    s += dev * dev;
  }
  s = warp_sum(s);
  __syncwarp();
  if (lane() == 0) {
    mean[i] = mu;
    squares[i] = s;
  }
}

// rstd may alias squares: every lane reads squares[i] first, lane 0 writes rstd[i] after the
// warp barrier.
__global__ void normalize_kernel(float* out, float* rstd, const float* x, const float* mean, const float* squares,
                                 const float* gamma, const float* beta, int64_t m, int64_t c, float inv_C, float eps) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = 1.0f / sqrtf(squares[i] * inv_C + eps);
  const float mu = mean[i];
  const float* row = x + i * c;
  float* o = out + i * c;
  for (int64_t j = lane(); j < c; j += kWarpSize) o[j] = (row[j] - mu) * s * gamma[j] + beta[j];
  __syncwarp();
  if (lane() == 0) rstd[i] = s;
}

__global__ void backward_partials_kernel(float* partials, const float* dout, const float* x, const float* mean,
                                         const float* rstd, const float* gamma, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float mu = mean[i], s = rstd[i];
  const float* row = x + i * c;
  const float* dy = dout + i * c;
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) {
    const float g = dy[j] * gamma[j];
    sum_g += g;
    sum_gx += g * ((row[j] - mu) * s);
  }
  sum_g = warp_sum(sum_g);
  sum_gx = warp_sum(sum_gx);
  if (lane() == 0) {
    partials[2 * i] = sum_g;
    partials[2 * i + 1] = sum_gx;
  }
}

__global__ void backward_dx_kernel(float* dx, const float* partials, const float* dout, const float* x,
                                   const float* mean, const float* rstd, const float* gamma, int64_t m, int64_t c,
                                   float inv_C) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float mu = mean[i], s = rstd[i];
  const float mean_g = partials[2 * i] * inv_C;       // (1/C) Σ dout·gamma over the full row
  const float mean_gx = partials[2 * i + 1] * inv_C;  // (1/C) Σ dout·gamma·x̂
  const float* row = x + i * c;
  const float* dy = dout + i * c;
  float* d = dx + i * c;
  for (int64_t j = lane(); j < c; j += kWarpSize) {
    const float xhat = (row[j] - mu) * s;
    d[j] += s * (dy[j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

// Pass 1 of dgamma and dbeta (column_sums.hpp's layout): per chunk of rows and column,
// Σ dout·x̂ into dgamma_partials and Σ dout into dbeta_partials, both (chunks, c).
__global__ void dgamma_chunks_kernel(float* dgamma_partials, float* dbeta_partials, const float* dout, const float* x,
                                     const float* mean, const float* rstd, int64_t m, int64_t c) {
  __shared__ float lanes_g[kRowLanes][kColumnTile + 1];
  __shared__ float lanes_b[kRowLanes][kColumnTile + 1];
  const int64_t chunk = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kColumnTile + threadIdx.x;
  const int64_t r0 = chunk * kColumnChunkRows;
  const int64_t r1 = r0 + kColumnChunkRows < m ? r0 + kColumnChunkRows : m;
  float sg = 0.0f, sb = 0.0f;
  if (j < c)
    for (int64_t i = r0 + threadIdx.y; i < r1; i += kRowLanes) {
      const float dy = dout[i * c + j];
      sg += dy * ((x[i * c + j] - mean[i]) * rstd[i]);
      sb += dy;
    }
  lanes_g[threadIdx.y][threadIdx.x] = sg;
  lanes_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float tg = 0.0f, tb = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) {
      tg += lanes_g[y][threadIdx.x];
      tb += lanes_b[y][threadIdx.x];
    }
    dgamma_partials[chunk * c + j] = tg;
    dbeta_partials[chunk * c + j] = tb;
  }
}

}  // namespace

void layernorm_residual_row_sums(const Context& ctx, float* x, float* sums, const float* a, const float* b, int64_t m,
                                 int64_t c) {
  const char* op = "layernorm_residual_row_sums";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  residual_row_sums_kernel<<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(x, sums, a, b, m, c);
  check_launch(ctx, op);
}

void layernorm_row_sums(const Context& ctx, float* sums, const float* x, int64_t m, int64_t c) {
  const char* op = "layernorm_row_sums";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  row_sums_kernel<<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(sums, x, m, c);
  check_launch(ctx, op);
}

void layernorm_centered_squares(const Context& ctx, float* mean, float* squares, const float* sums, const float* x,
                                int64_t m, int64_t c, int64_t C) {
  const char* op = "layernorm_centered_squares";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  centered_squares_kernel<<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(mean, squares, sums, x, m, c, inv_C);
  check_launch(ctx, op);
}

void layernorm_normalize(const Context& ctx, float* out, float* rstd, const float* x, const float* mean,
                         const float* squares, const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                         float eps) {
  const char* op = "layernorm_normalize";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  normalize_kernel<<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(out, rstd, x, mean, squares, gamma, beta, m, c,
                                                                   inv_C, eps);
  check_launch(ctx, op);
}

void layernorm_backward_partials(const Context& ctx, float* partials, const float* dout, const float* x,
                                 const float* mean, const float* rstd, const float* gamma, int64_t m, int64_t c) {
  const char* op = "layernorm_backward_partials";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  backward_partials_kernel<<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(partials, dout, x, mean, rstd, gamma, m, c);
  check_launch(ctx, op);
}

void layernorm_backward_finish(const Context& ctx, float* dx, float* dgamma, float* dbeta, const float* partials,
                               const float* dout, const float* x, const float* mean, const float* rstd,
                               const float* gamma, int64_t m, int64_t c, int64_t C) {
  const char* op = "layernorm_backward_finish";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0 || c == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  backward_dx_kernel<<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(dx, partials, dout, x, mean, rstd, gamma, m, c,
                                                                     inv_C);
  check_launch(ctx, op);

  const int64_t chunks = column_chunks(m);
  ScratchLayout layout;
  const size_t g_at = layout.add(static_cast<size_t>(chunks * c) * sizeof(float));
  const size_t b_at = layout.add(static_cast<size_t>(chunks * c) * sizeof(float));
  auto* base = static_cast<char*>(ctx.scratch->get(ctx.stream, layout.total(), op));
  auto* dgamma_partials = reinterpret_cast<float*>(base + g_at);
  auto* dbeta_partials = reinterpret_cast<float*>(base + b_at);
  dgamma_chunks_kernel<<<column_chunk_grid(op, m, c), dim3(kColumnTile, kRowLanes), 0, ctx.stream>>>(
      dgamma_partials, dbeta_partials, dout, x, mean, rstd, m, c);
  check_launch(ctx, op);
  add_column_partials(ctx, op, dgamma, dgamma_partials, chunks, c);
  add_column_partials(ctx, op, dbeta, dbeta_partials, chunks, c);
}

}  // namespace axonn::cuda
