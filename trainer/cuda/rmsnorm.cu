#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/column_sums.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/rmsnorm.hpp"

namespace axonn::cuda {
namespace {
// One warp per row, kWarpsPerBlock rows per block, as layernorm.cu; a warp whose row is past
// m returns as a whole (no lane is left out of a shuffle).
__device__ inline int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}
__device__ inline int lane() { return static_cast<int>(threadIdx.x % kWarpSize); }

unsigned row_blocks(const char* op, int64_t m) {
  return grid_dim(op, "row blocks", (m + kWarpsPerBlock - 1) / kWarpsPerBlock, true);
}

// ---- one row's pieces, each lane over its strided columns then the warp's tree; the staged
// and whole-row kernels run the same pieces in the same order, so they give the same bits.
// A piece that writes the row reads kRowBatch of its lane's columns before it stores any
// (layernorm.cu says why: a store may alias the next load, so one column at a time waits
// out the memory latency per column).
constexpr int kRowBatch = 8;
constexpr int64_t kBatchColumns = static_cast<int64_t>(kRowBatch) * kWarpSize;

template <typename T>
__device__ inline float row_square_sum(const T* row, int64_t c) {
  float s = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) {
    const float v = load(row + j);
    s += v * v;
  }
  return warp_sum(s);
}

// row = a + b, its squares summed as stored (rounded to T), so the statistic describes the
// row that normalize reads. row may alias ra or rb: each element is read and written by one lane.
template <typename T>
__device__ inline float residual_row_square_sum(T* row, const T* ra, const T* rb, int64_t c) {
  float s = 0.0f;
  for (int64_t j0 = lane(); j0 < c; j0 += kBatchColumns) {
    float v[kRowBatch];
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      v[u] = j < c ? rounded<T>(load(ra + j) + load(rb + j)) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) {
        store(row + j, v[u]);
        s += v[u] * v[u];
      }
    }
  }
  return warp_sum(s);
}

__device__ inline float rstd_of(float squares, float inv_C, float eps) { return 1.0f / sqrtf(squares * inv_C + eps); }

template <typename T>
__device__ inline void normalize_row(T* o, const T* row, float s, const float* gamma, int64_t c) {
  for (int64_t j0 = lane(); j0 < c; j0 += kBatchColumns) {
    float v[kRowBatch];
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) v[u] = load(row + j) * s * gamma[j];
    }
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) store(o + j, v[u]);
    }
  }
}

// Σ_j dout·gamma·x̂ over the row's columns.
template <typename T>
__device__ inline float backward_row_partial(const T* dy, const T* row, float s, const float* gamma, int64_t c) {
  float sum = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) sum += load(dy + j) * gamma[j] * (load(row + j) * s);
  return warp_sum(sum);
}

// d += rstd·(dout·gamma − x̂·mean_gx), mean_gx the mean over the full row.
template <typename T>
__device__ inline void backward_row_dx(T* d, const T* dy, const T* row, float s, const float* gamma, float mean_gx,
                                       int64_t c) {
  for (int64_t j0 = lane(); j0 < c; j0 += kBatchColumns) {
    float v[kRowBatch];
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) v[u] = load(d + j) + s * (load(dy + j) * gamma[j] - (load(row + j) * s) * mean_gx);
    }
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) store(d + j, v[u]);
    }
  }
}

// ---- the staged kernels (rows split over ranks; collectives between them)

template <typename T>
__global__ void row_squares_kernel(float* squares, const T* x, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = row_square_sum(x + i * c, c);
  if (lane() == 0) squares[i] = s;
}

template <typename T>
__global__ void residual_row_squares_kernel(T* x, float* squares, const T* a, const T* b, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = residual_row_square_sum(x + i * c, a + i * c, b + i * c, c);
  if (lane() == 0) squares[i] = s;
}

// rstd may alias squares: every lane reads squares[i] first, lane 0 writes rstd[i] after the
// warp barrier.
template <typename T>
__global__ void normalize_kernel(T* out, float* rstd, const T* x, const float* squares, const float* gamma, int64_t m,
                                 int64_t c, float inv_C, float eps) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = rstd_of(squares[i], inv_C, eps);
  normalize_row(out + i * c, x + i * c, s, gamma, c);
  __syncwarp();
  if (lane() == 0) rstd[i] = s;
}

template <typename T>
__global__ void backward_partials_kernel(float* partials, const T* dout, const T* x, const float* rstd,
                                         const float* gamma, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float p = backward_row_partial(dout + i * c, x + i * c, rstd[i], gamma, c);
  if (lane() == 0) partials[i] = p;
}

template <typename T>
__global__ void backward_dx_kernel(T* dx, const float* partials, const T* dout, const T* x, const float* rstd,
                                   const float* gamma, int64_t m, int64_t c, float inv_C) {
  const int64_t i = warp_row();
  if (i >= m) return;
  backward_row_dx(dx + i * c, dout + i * c, x + i * c, rstd[i], gamma, partials[i] * inv_C, c);
}

// ---- whole rows (one rank holds all C columns): a warp runs its row's stages back to back;
// the second pass re-reads what this warp just touched, from L1/L2.

template <typename T>
__global__ void rows_kernel(T* out, float* rstd, const T* x, const float* gamma, int64_t m, int64_t C, float inv_C,
                            float eps) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const T* row = x + i * C;
  const float s = rstd_of(row_square_sum(row, C), inv_C, eps);
  normalize_row(out + i * C, row, s, gamma, C);
  if (lane() == 0) rstd[i] = s;
}

// x may alias a or b.
template <typename T>
__global__ void residual_rows_kernel(T* x, T* out, float* rstd, const T* a, const T* b, const float* gamma, int64_t m,
                                     int64_t C, float inv_C, float eps) {
  const int64_t i = warp_row();
  if (i >= m) return;
  T* row = x + i * C;
  const float s = rstd_of(residual_row_square_sum(row, a + i * C, b + i * C, C), inv_C, eps);
  normalize_row(out + i * C, row, s, gamma, C);
  if (lane() == 0) rstd[i] = s;
}

template <typename T>
__global__ void rows_backward_dx_kernel(T* dx, float* partials, const T* dout, const T* x, const float* rstd,
                                        const float* gamma, int64_t m, int64_t C, float inv_C) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = rstd[i];
  const float p = backward_row_partial(dout + i * C, x + i * C, s, gamma, C);
  backward_row_dx(dx + i * C, dout + i * C, x + i * C, s, gamma, p * inv_C, C);
  if (lane() == 0) partials[i] = p;
}

// Pass 1 of dgamma (column_sums.hpp's layout): per chunk of rows and column, Σ dout·x̂ into
// dgamma_partials (chunks, c).
template <typename T>
__global__ void dgamma_chunks_kernel(float* dgamma_partials, const T* dout, const T* x, const float* rstd, int64_t m,
                                     int64_t c) {
  __shared__ float lanes_g[kRowLanes][kColumnTile + 1];
  const int64_t chunk = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kColumnTile + threadIdx.x;
  const int64_t r0 = chunk * kColumnChunkRows;
  const int64_t r1 = r0 + kColumnChunkRows < m ? r0 + kColumnChunkRows : m;
  float sg = 0.0f;
  if (j < c)
    for (int64_t i = r0 + threadIdx.y; i < r1; i += kRowLanes)
      sg += load(dout + i * c + j) * (load(x + i * c + j) * rstd[i]);
  lanes_g[threadIdx.y][threadIdx.x] = sg;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float tg = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) tg += lanes_g[y][threadIdx.x];
    dgamma_partials[chunk * c + j] = tg;
  }
}

// dgamma (c) += Σ_rows dout·x̂, in column_sums.hpp's two passes.
void add_dgamma(const Context& ctx, const char* op, float* dgamma, ConstActPtr dout, ConstActPtr x, const float* rstd,
                int64_t m, int64_t c) {
  const int64_t chunks = column_chunks(m);
  auto* dgamma_partials =
      static_cast<float*>(ctx.scratch->get(ctx.stream, static_cast<size_t>(chunks * c) * sizeof(float), op));
  with_storage(common_type(op, {dout, x}), [&](auto t) {
    using T = decltype(t);
    dgamma_chunks_kernel<T><<<column_chunk_grid(op, m, c), dim3(kColumnTile, kRowLanes), 0, ctx.stream>>>(
        dgamma_partials, typed<T>(dout), typed<T>(x), rstd, m, c);
  });
  check_launch(ctx, op);
  add_column_partials(ctx, op, dgamma, dgamma_partials, chunks, c);
}

}  // namespace

void rmsnorm_row_squares(const Context& ctx, float* squares, ConstActPtr x, int64_t m, int64_t c) {
  const char* op = "rmsnorm_row_squares";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  with_storage(x.type(), [&](auto t) {
    using T = decltype(t);
    row_squares_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(squares, typed<T>(x), m, c);
  });
  check_launch(ctx, op);
}

void rmsnorm_residual_row_squares(const Context& ctx, ActPtr x, float* squares, ConstActPtr a, ConstActPtr b, int64_t m,
                                  int64_t c) {
  const char* op = "rmsnorm_residual_row_squares";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  with_storage(common_type(op, {x, a, b}), [&](auto t) {
    using T = decltype(t);
    residual_row_squares_kernel<T>
        <<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(x), squares, typed<T>(a), typed<T>(b), m, c);
  });
  check_launch(ctx, op);
}

void rmsnorm_normalize(const Context& ctx, ActPtr out, float* rstd, ConstActPtr x, const float* squares,
                       const float* gamma, int64_t m, int64_t c, int64_t C, float eps) {
  const char* op = "rmsnorm_normalize";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {out, x}), [&](auto t) {
    using T = decltype(t);
    normalize_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(out), rstd, typed<T>(x), squares,
                                                                        gamma, m, c, inv_C, eps);
  });
  check_launch(ctx, op);
}

void rmsnorm_backward_partials(const Context& ctx, float* partials, ConstActPtr dout, ConstActPtr x, const float* rstd,
                               const float* gamma, int64_t m, int64_t c) {
  const char* op = "rmsnorm_backward_partials";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  with_storage(common_type(op, {dout, x}), [&](auto t) {
    using T = decltype(t);
    backward_partials_kernel<T>
        <<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(partials, typed<T>(dout), typed<T>(x), rstd, gamma, m, c);
  });
  check_launch(ctx, op);
}

void rmsnorm_backward_finish(const Context& ctx, ActPtr dx, float* dgamma, const float* partials, ConstActPtr dout,
                             ConstActPtr x, const float* rstd, const float* gamma, int64_t m, int64_t c, int64_t C) {
  const char* op = "rmsnorm_backward_finish";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0 || c == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {dx, dout, x}), [&](auto t) {
    using T = decltype(t);
    backward_dx_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(dx), partials, typed<T>(dout),
                                                                          typed<T>(x), rstd, gamma, m, c, inv_C);
  });
  check_launch(ctx, op);
  add_dgamma(ctx, op, dgamma, dout, x, rstd, m, c);
}

void rmsnorm_rows(const Context& ctx, ActPtr out, float* rstd, ConstActPtr x, const float* gamma, int64_t m, int64_t C,
                  float eps) {
  const char* op = "rmsnorm_rows";
  op_checks::require_layernorm_shape(op, m, C, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {out, x}), [&](auto t) {
    using T = decltype(t);
    rows_kernel<T>
        <<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(out), rstd, typed<T>(x), gamma, m, C, inv_C, eps);
  });
  check_launch(ctx, op);
}

void residual_rmsnorm_rows(const Context& ctx, ActPtr x, ActPtr out, float* rstd, ConstActPtr a, ConstActPtr b,
                           const float* gamma, int64_t m, int64_t C, float eps) {
  const char* op = "residual_rmsnorm_rows";
  op_checks::require_layernorm_shape(op, m, C, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {x, out, a, b}), [&](auto t) {
    using T = decltype(t);
    residual_rows_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(
        typed<T>(x), typed<T>(out), rstd, typed<T>(a), typed<T>(b), gamma, m, C, inv_C, eps);
  });
  check_launch(ctx, op);
}

void rmsnorm_rows_backward(const Context& ctx, ActPtr dx, float* dgamma, float* partials, ConstActPtr dout,
                           ConstActPtr x, const float* rstd, const float* gamma, int64_t m, int64_t C) {
  const char* op = "rmsnorm_rows_backward";
  op_checks::require_layernorm_shape(op, m, C, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {dx, dout, x}), [&](auto t) {
    using T = decltype(t);
    rows_backward_dx_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(dx), partials, typed<T>(dout),
                                                                               typed<T>(x), rstd, gamma, m, C, inv_C);
  });
  check_launch(ctx, op);
  add_dgamma(ctx, op, dgamma, dout, x, rstd, m, C);
}

}  // namespace axonn::cuda
