#include "trainer/cuda/act_storage.cuh"
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

// ---- one row's pieces, each lane over its strided columns then the warp's tree: the staged
// kernels and the whole-row kernels run the same pieces in the same order, so they give the
// same bits. Every lane gets a sum's result.
//
// A piece that writes the row reads kRowBatch of its lane's columns before it stores any:
// the compiler must assume a store may change what the next load reads (the pointers may
// alias), so a loop that loads, computes and stores one column at a time waits out the
// memory latency once per column. That loop made LayerNorm's backward dx 27x slower than its
// read-only row pass on an H100 (269 vs 9.7 us at 8192 x 1024 bf16). Batching keeps each
// column's arithmetic and each lane's summation order, so the bits are unchanged.
constexpr int kRowBatch = 8;
constexpr int64_t kBatchColumns = static_cast<int64_t>(kRowBatch) * kWarpSize;  // one batch's stride in a row

template <typename T>
__device__ inline float row_sum(const T* row, int64_t c) {
  float s = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) s += load(row + j);
  return warp_sum(s);
}

// row = a + b, summed as stored (rounded to T), so the statistics describe the row that
// normalize reads. row may alias ra or rb: each element is read and written by one lane.
template <typename T>
__device__ inline float residual_row_sum(T* row, const T* ra, const T* rb, int64_t c) {
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
        s += v[u];
      }
    }
  }
  return warp_sum(s);
}

template <typename T>
__device__ inline float centered_square_sum(const T* row, float mu, int64_t c) {
  float s = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) {
    const float dev = load(row + j) - mu;
    s += dev * dev;
  }
  return warp_sum(s);
}

__device__ inline float rstd_of(float squares, float inv_C, float eps) { return 1.0f / sqrtf(squares * inv_C + eps); }

template <typename T>
__device__ inline void normalize_row(T* o, const T* row, float mu, float s, const float* gamma, const float* beta,
                                     int64_t c) {
  for (int64_t j0 = lane(); j0 < c; j0 += kBatchColumns) {
    float v[kRowBatch];
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) v[u] = (load(row + j) - mu) * s * gamma[j] + beta[j];
    }
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) store(o + j, v[u]);
    }
  }
}

// (Σ_j dout·gamma, Σ_j dout·gamma·x̂) over the row's columns.
template <typename T>
__device__ inline float2 backward_row_partials(const T* dy, const T* row, float mu, float s, const float* gamma,
                                               int64_t c) {
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = lane(); j < c; j += kWarpSize) {
    const float g = load(dy + j) * gamma[j];
    sum_g += g;
    sum_gx += g * ((load(row + j) - mu) * s);
  }
  return make_float2(warp_sum(sum_g), warp_sum(sum_gx));
}

// d += rstd·(dout·gamma − mean_g − x̂·mean_gx), the means over the full row.
template <typename T>
__device__ inline void backward_row_dx(T* d, const T* dy, const T* row, float mu, float s, const float* gamma,
                                       float mean_g, float mean_gx, int64_t c) {
  for (int64_t j0 = lane(); j0 < c; j0 += kBatchColumns) {
    float v[kRowBatch];
#pragma unroll
    for (int u = 0; u < kRowBatch; ++u) {
      const int64_t j = j0 + u * kWarpSize;
      if (j < c) {
        const float xhat = (load(row + j) - mu) * s;
        v[u] = load(d + j) + s * (load(dy + j) * gamma[j] - mean_g - xhat * mean_gx);
      }
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
__global__ void row_sums_kernel(float* sums, const T* x, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = row_sum(x + i * c, c);
  if (lane() == 0) sums[i] = s;
}

// x may alias a or b.
template <typename T>
__global__ void residual_row_sums_kernel(T* x, float* sums, const T* a, const T* b, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = residual_row_sum(x + i * c, a + i * c, b + i * c, c);
  if (lane() == 0) sums[i] = s;
}

// mean may alias sums: every lane reads sums[i] before the shuffles, lane 0 writes after.
template <typename T>
__global__ void centered_squares_kernel(float* mean, float* squares, const float* sums, const T* x, int64_t m,
                                        int64_t c, float inv_C) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float mu = sums[i] * inv_C;
  const float s = centered_square_sum(x + i * c, mu, c);
  __syncwarp();
  if (lane() == 0) {
    mean[i] = mu;
    squares[i] = s;
  }
}

// rstd may alias squares: every lane reads squares[i] first, lane 0 writes rstd[i] after the
// warp barrier.
template <typename T>
__global__ void normalize_kernel(T* out, float* rstd, const T* x, const float* mean, const float* squares,
                                 const float* gamma, const float* beta, int64_t m, int64_t c, float inv_C, float eps) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float s = rstd_of(squares[i], inv_C, eps);
  normalize_row(out + i * c, x + i * c, mean[i], s, gamma, beta, c);
  __syncwarp();
  if (lane() == 0) rstd[i] = s;
}

template <typename T>
__global__ void backward_partials_kernel(float* partials, const T* dout, const T* x, const float* mean,
                                         const float* rstd, const float* gamma, int64_t m, int64_t c) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float2 p = backward_row_partials(dout + i * c, x + i * c, mean[i], rstd[i], gamma, c);
  if (lane() == 0) {
    partials[2 * i] = p.x;
    partials[2 * i + 1] = p.y;
  }
}

template <typename T>
__global__ void backward_dx_kernel(T* dx, const float* partials, const T* dout, const T* x, const float* mean,
                                   const float* rstd, const float* gamma, int64_t m, int64_t c, float inv_C) {
  const int64_t i = warp_row();
  if (i >= m) return;
  backward_row_dx(dx + i * c, dout + i * c, x + i * c, mean[i], rstd[i], gamma, partials[2 * i] * inv_C,
                  partials[2 * i + 1] * inv_C, c);
}

// ---- whole rows (one rank holds all C columns): a warp runs its row's stages back to back.
// The HBM traffic is the inputs read once and the outputs written once; the later passes
// over a row re-read what this warp just touched, from L1/L2.

// The statistics and the normalized row of a row x whose sum is known.
template <typename T>
__device__ inline void normalize_whole_row(T* o, float* mean, float* rstd, const T* row, float sum, const float* gamma,
                                           const float* beta, int64_t i, int64_t C, float inv_C, float eps) {
  const float mu = sum * inv_C;
  const float s = rstd_of(centered_square_sum(row, mu, C), inv_C, eps);
  normalize_row(o, row, mu, s, gamma, beta, C);
  if (lane() == 0) {
    mean[i] = mu;
    rstd[i] = s;
  }
}

template <typename T>
__global__ void rows_kernel(T* out, float* mean, float* rstd, const T* x, const float* gamma, const float* beta,
                            int64_t m, int64_t C, float inv_C, float eps) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const T* row = x + i * C;
  normalize_whole_row(out + i * C, mean, rstd, row, row_sum(row, C), gamma, beta, i, C, inv_C, eps);
}

// x may alias a or b.
template <typename T>
__global__ void residual_rows_kernel(T* x, T* out, float* mean, float* rstd, const T* a, const T* b, const float* gamma,
                                     const float* beta, int64_t m, int64_t C, float inv_C, float eps) {
  const int64_t i = warp_row();
  if (i >= m) return;
  T* row = x + i * C;
  const float sum = residual_row_sum(row, a + i * C, b + i * C, C);
  normalize_whole_row(out + i * C, mean, rstd, row, sum, gamma, beta, i, C, inv_C, eps);
}

template <typename T>
__global__ void rows_backward_dx_kernel(T* dx, float* partials, const T* dout, const T* x, const float* mean,
                                        const float* rstd, const float* gamma, int64_t m, int64_t C, float inv_C) {
  const int64_t i = warp_row();
  if (i >= m) return;
  const float mu = mean[i], s = rstd[i];
  const float2 p = backward_row_partials(dout + i * C, x + i * C, mu, s, gamma, C);
  backward_row_dx(dx + i * C, dout + i * C, x + i * C, mu, s, gamma, p.x * inv_C, p.y * inv_C, C);
  if (lane() == 0) {
    partials[2 * i] = p.x;
    partials[2 * i + 1] = p.y;
  }
}

// Pass 1 of dgamma and dbeta (column_sums.hpp's layout): per chunk of rows and column,
// Σ dout·x̂ into dgamma_partials and Σ dout into dbeta_partials, both (chunks, c).
template <typename T>
__global__ void dgamma_chunks_kernel(float* dgamma_partials, float* dbeta_partials, const T* dout, const T* x,
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
      const float dy = load(dout + i * c + j);
      sg += dy * ((load(x + i * c + j) - mean[i]) * rstd[i]);
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

void layernorm_residual_row_sums(const Context& ctx, ActPtr x, float* sums, ConstActPtr a, ConstActPtr b, int64_t m,
                                 int64_t c) {
  const char* op = "layernorm_residual_row_sums";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  with_storage(common_type(op, {x, a, b}), [&](auto t) {
    using T = decltype(t);
    residual_row_sums_kernel<T>
        <<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(x), sums, typed<T>(a), typed<T>(b), m, c);
  });
  check_launch(ctx, op);
}

void layernorm_row_sums(const Context& ctx, float* sums, ConstActPtr x, int64_t m, int64_t c) {
  const char* op = "layernorm_row_sums";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  with_storage(x.type(), [&](auto t) {
    using T = decltype(t);
    row_sums_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(sums, typed<T>(x), m, c);
  });
  check_launch(ctx, op);
}

void layernorm_centered_squares(const Context& ctx, float* mean, float* squares, const float* sums, ConstActPtr x,
                                int64_t m, int64_t c, int64_t C) {
  const char* op = "layernorm_centered_squares";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(x.type(), [&](auto t) {
    using T = decltype(t);
    centered_squares_kernel<T>
        <<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(mean, squares, sums, typed<T>(x), m, c, inv_C);
  });
  check_launch(ctx, op);
}

void layernorm_normalize(const Context& ctx, ActPtr out, float* rstd, ConstActPtr x, const float* mean,
                         const float* squares, const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                         float eps) {
  const char* op = "layernorm_normalize";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {out, x}), [&](auto t) {
    using T = decltype(t);
    normalize_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(out), rstd, typed<T>(x), mean, squares,
                                                                        gamma, beta, m, c, inv_C, eps);
  });
  check_launch(ctx, op);
}

void layernorm_backward_partials(const Context& ctx, float* partials, ConstActPtr dout, ConstActPtr x,
                                 const float* mean, const float* rstd, const float* gamma, int64_t m, int64_t c) {
  const char* op = "layernorm_backward_partials";
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  if (m == 0) return;
  with_storage(common_type(op, {dout, x}), [&](auto t) {
    using T = decltype(t);
    backward_partials_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(partials, typed<T>(dout), typed<T>(x),
                                                                                mean, rstd, gamma, m, c);
  });
  check_launch(ctx, op);
}

namespace {

// dgamma (c) += Σ_rows dout·x̂, dbeta (c) += Σ_rows dout, in column_sums.hpp's two passes.
void add_dgamma_dbeta(const Context& ctx, const char* op, float* dgamma, float* dbeta, ConstActPtr dout, ConstActPtr x,
                      const float* mean, const float* rstd, int64_t m, int64_t c) {
  const int64_t chunks = column_chunks(m);
  ScratchLayout layout;
  const size_t g_at = layout.add(static_cast<size_t>(chunks * c) * sizeof(float));
  const size_t b_at = layout.add(static_cast<size_t>(chunks * c) * sizeof(float));
  auto* base = static_cast<char*>(ctx.scratch->get(ctx.stream, layout.total(), op));
  auto* dgamma_partials = reinterpret_cast<float*>(base + g_at);
  auto* dbeta_partials = reinterpret_cast<float*>(base + b_at);
  with_storage(common_type(op, {dout, x}), [&](auto t) {
    using T = decltype(t);
    dgamma_chunks_kernel<T><<<column_chunk_grid(op, m, c), dim3(kColumnTile, kRowLanes), 0, ctx.stream>>>(
        dgamma_partials, dbeta_partials, typed<T>(dout), typed<T>(x), mean, rstd, m, c);
  });
  check_launch(ctx, op);
  add_column_partials(ctx, op, dgamma, dgamma_partials, chunks, c);
  add_column_partials(ctx, op, dbeta, dbeta_partials, chunks, c);
}

}  // namespace

void layernorm_backward_finish(const Context& ctx, ActPtr dx, float* dgamma, float* dbeta, const float* partials,
                               ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd,
                               const float* gamma, int64_t m, int64_t c, int64_t C) {
  const char* op = "layernorm_backward_finish";
  op_checks::require_layernorm_shape(op, m, c, C);
  if (m == 0 || c == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {dx, dout, x}), [&](auto t) {
    using T = decltype(t);
    backward_dx_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(dx), partials, typed<T>(dout),
                                                                          typed<T>(x), mean, rstd, gamma, m, c, inv_C);
  });
  check_launch(ctx, op);
  add_dgamma_dbeta(ctx, op, dgamma, dbeta, dout, x, mean, rstd, m, c);
}

void layernorm_rows(const Context& ctx, ActPtr out, float* mean, float* rstd, ConstActPtr x, const float* gamma,
                    const float* beta, int64_t m, int64_t C, float eps) {
  const char* op = "layernorm_rows";
  op_checks::require_layernorm_shape(op, m, C, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {out, x}), [&](auto t) {
    using T = decltype(t);
    rows_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(typed<T>(out), mean, rstd, typed<T>(x), gamma, beta,
                                                                   m, C, inv_C, eps);
  });
  check_launch(ctx, op);
}

void residual_layernorm_rows(const Context& ctx, ActPtr x, ActPtr out, float* mean, float* rstd, ConstActPtr a,
                             ConstActPtr b, const float* gamma, const float* beta, int64_t m, int64_t C, float eps) {
  const char* op = "residual_layernorm_rows";
  op_checks::require_layernorm_shape(op, m, C, C);
  if (m == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {x, out, a, b}), [&](auto t) {
    using T = decltype(t);
    residual_rows_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(
        typed<T>(x), typed<T>(out), mean, rstd, typed<T>(a), typed<T>(b), gamma, beta, m, C, inv_C, eps);
  });
  check_launch(ctx, op);
}

void layernorm_rows_backward(const Context& ctx, ActPtr dx, float* dgamma, float* dbeta, float* partials,
                             ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd, const float* gamma,
                             int64_t m, int64_t C) {
  const char* op = "layernorm_rows_backward";
  op_checks::require_layernorm_shape(op, m, C, C);
  if (m == 0 || C == 0) return;
  const float inv_C = 1.0f / static_cast<float>(C);
  with_storage(common_type(op, {dx, dout, x}), [&](auto t) {
    using T = decltype(t);
    rows_backward_dx_kernel<T><<<row_blocks(op, m), kThreads, 0, ctx.stream>>>(
        typed<T>(dx), partials, typed<T>(dout), typed<T>(x), mean, rstd, gamma, m, C, inv_C);
  });
  check_launch(ctx, op);
  add_dgamma_dbeta(ctx, op, dgamma, dbeta, dout, x, mean, rstd, m, C);
}

}  // namespace axonn::cuda
