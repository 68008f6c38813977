#include <cmath>
#include <string>

#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/attention.hpp"
#include "trainer/cuda/attention_bf16.hpp"
#include "trainer/cuda/attention_tiles.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/gemm.hpp"

namespace axonn::cuda {
namespace {

using namespace attention_tiles;

// Query rows per block and keys per tile: one key per lane for the scores.
constexpr int kTile = kWarpSize;
constexpr int kRowsPerWarp = kTile / kWarpsPerBlock;  // 4: the rows (or keys) one warp owns
static_assert(kTile % kWarpsPerBlock == 0, "the tile's rows split evenly over the block's warps");

// The shared checks, and the head size these kernels hold per row.
void require_shape(const char* op, int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d,
                   int64_t group_stride) {
  op_checks::require_attention_shape(op, ld, B, T, h, kv, d, group_stride);
  if (d > kAttentionMaxHeadSize)
    fail(op, "head size d = " + std::to_string(d) + " exceeds " + std::to_string(kAttentionMaxHeadSize) +
                 ", the most the CUDA attention kernels hold per row; use more heads (hidden/heads <= " +
                 std::to_string(kAttentionMaxHeadSize) + ")");
}

// Row stride of a shared tile whose rows are read one per lane (lane j reads row j, element
// e, all lanes at once): odd, so the 32 rows fall in 32 different banks.
__host__ __device__ inline int odd_stride(int d) { return d % 2 == 0 ? d + 1 : d; }

// Rows [0, 32) of a shared tile (row stride `stride`) = rows row0 .. row0+31 of a (T, d) view
// at src (row stride ld), 0 for rows at or past T. Every thread of the block takes part.
// Act: the activations' storage type (act_storage.cuh); shared tiles are float32.
template <typename Act>
__device__ inline void load_tile(float* dst, int stride, const Act* src, int64_t ld, int64_t row0, int64_t T, int d) {
  for (int i = threadIdx.x; i < kTile * d; i += blockDim.x) {
    const int r = i / d, e = i - r * d;
    const int64_t row = row0 + r;
    dst[r * stride + e] = row < T ? load(src + row * ld + e) : 0.0f;
  }
}

// dot[r] = Σ_e a[r·d + e]·b[e] for the warp's 4 rows of a (the same address on every lane: a
// broadcast) against this lane's row b of the other tile.
__device__ __forceinline__ void row_dots(float (&dot)[kRowsPerWarp], const float* a, const float* b, int d) {
  for (int r = 0; r < kRowsPerWarp; ++r) dot[r] = 0.0f;
  for (int e = 0; e < d; ++e) {
    const float be = b[e];
    for (int r = 0; r < kRowsPerWarp; ++r) dot[r] += a[r * d + e] * be;
  }
}

// acc[r][c] += Σ_j w_j[r]·tile[j·stride + e], e = lane + 32c, over the 32 rows j of a shared
// tile, where w_j[r] is lane j's w[r] (the weight of row j for the warp's row r).
template <int kCols>
__device__ __forceinline__ void add_weighted_rows(float (&acc)[kRowsPerWarp][kCols], const float (&w)[kRowsPerWarp],
                                                  const float* tile, int stride, int d) {
  const int lane = threadIdx.x % kWarpSize;
  for (int j = 0; j < kTile; ++j) {
    float row[kCols];
    for (int c = 0; c < kCols; ++c) {
      const int e = lane + c * kWarpSize;
      row[c] = e < d ? tile[j * stride + e] : 0.0f;
    }
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float wj = __shfl_sync(kFullMask, w[r], j);
      for (int c = 0; c < kCols; ++c) acc[r][c] += wj * row[c];
    }
  }
}

// Forward, one block per (pair, 32 query rows). kCols = ceil(d/32) columns per lane; kD > 0:
// d fixed at compile time (the loops over d unroll), 0: s.d.
// Shared: qs (32, d) the queries; ks (32, odd) and vs (32, d) one key/value tile.
template <int kCols, int kD, typename Act>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Act* out, float* lse, const Act* q, const Act* k, const Act* v, Shape s) {
  extern __shared__ float smem[];
  const int d = kD > 0 ? kD : s.d, stride = odd_stride(d);
  float* qs = smem;
  float* ks = qs + kTile * d;
  float* vs = ks + kTile * stride;
  const BlockTile bt = block_tile(s, s.pairs, true);
  const PairBase base = pair_base(s, bt.pair);
  const int64_t q0 = bt.tile * kTile;
  const int lane = threadIdx.x % kWarpSize, r0 = threadIdx.x / kWarpSize * kRowsPerWarp;  // rows r0 .. r0+3
  load_tile(qs, d, q + base.q, s.ld, q0, s.T, d);
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp], acc[kRowsPerWarp][kCols];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    row_max[r] = neg_inf();
    row_sum[r] = 0.0f;
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  // Rows at or past T hold zero queries: computed (finite), never written.
  const int64_t keys = q0 + kTile < s.T ? q0 + kTile : s.T;  // the tile's rows see keys < keys
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();  // every warp is done with the previous ks, vs (and qs is loaded)
    load_tile(ks, stride, k + base.kv, s.ld, j0, s.T, d);
    load_tile(vs, d, v + base.kv, s.ld, j0, s.T, d);
    __syncthreads();
    float p[kRowsPerWarp];
    row_dots(p, qs + r0 * d, ks + lane * stride, d);
    const int64_t j = j0 + lane;  // this lane's key
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const bool seen = j <= q0 + r0 + r;
      const float x = seen ? p[r] * s.scale : neg_inf();
      // j0 <= q0 <= t: key j0 is seen, so the max is finite; alpha is 0 on the first tile.
      const float new_max = fmaxf(row_max[r], warp_max(x));
      const float alpha = expf(row_max[r] - new_max);
      p[r] = seen ? expf(x - new_max) : 0.0f;
      row_sum[r] = row_sum[r] * alpha + warp_sum(p[r]);
      row_max[r] = new_max;
      for (int c = 0; c < kCols; ++c) acc[r][c] *= alpha;
    }
    add_weighted_rows(acc, p, vs, d, d);  // O += P · V
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t t = q0 + r0 + r;
    if (t >= s.T) continue;  // the same t on every lane
    const float inv = 1.0f / row_sum[r];
    Act* o = out + base.out + t * s.h * d;
    for (int c = 0; c < kCols; ++c) {
      const int e = lane + c * kWarpSize;
      if (e < d) store(o + e, acc[r][c] * inv);
    }
    if (lane == 0) lse[bt.pair * s.T + t] = row_max[r] + logf(row_sum[r]);
  }
}

// dsum (B, h, T) = Σ_e dout ⊙ out of each query row; one warp per row, pair-major.
template <typename Act>
__global__ void row_dot_kernel(float* dsum, const Act* dout, const Act* out, int64_t rows, Shape s) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp
  const int lane = threadIdx.x % kWarpSize;
  const int64_t pair = row / s.T, t = row - pair * s.T;
  const int64_t b = pair / s.h, head = pair - b * s.h;
  const int64_t at = (b * s.T + t) * s.h * s.d + head * s.d;
  float sum = 0.0f;
  for (int e = lane; e < s.d; e += kWarpSize) sum += load(dout + at + e) * load(out + at + e);
  sum = warp_sum(sum);
  if (lane == 0) dsum[row] = sum;
}

// dQ, one block per (pair, 32 query rows), over the key tiles the rows see:
// dQ = Σ_tiles dS · K / sqrt(d), dS = P ⊙ (dO·V^T − D), P = exp(Q·K^T/sqrt(d) − lse).
// Shared: qs, dos (32, d) the rows' queries and output gradients; ks, vs (32, odd) one tile.
template <int kCols, int kD, typename Act>
__global__ void __launch_bounds__(kThreads) dq_kernel(Act* dq, const Act* dout, const float* lse, const float* dsum,
                                                      const Act* q, const Act* k, const Act* v, Shape s) {
  extern __shared__ float smem[];
  const int d = kD > 0 ? kD : s.d, stride = odd_stride(d);
  float* qs = smem;
  float* dos = qs + kTile * d;
  float* ks = dos + kTile * d;
  float* vs = ks + kTile * stride;
  const BlockTile bt = block_tile(s, s.pairs, true);
  const PairBase base = pair_base(s, bt.pair);
  const int64_t q0 = bt.tile * kTile;
  const int lane = threadIdx.x % kWarpSize, r0 = threadIdx.x / kWarpSize * kRowsPerWarp;
  load_tile(qs, d, q + base.q, s.ld, q0, s.T, d);
  load_tile(dos, d, dout + base.out, s.h * d, q0, s.T, d);
  // Rows at or past T: zero q and dO, lse = D = 0, so finite; never written.
  float row_lse[kRowsPerWarp], row_d[kRowsPerWarp], acc[kRowsPerWarp][kCols];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t t = q0 + r0 + r;
    row_lse[r] = t < s.T ? lse[bt.pair * s.T + t] : 0.0f;
    row_d[r] = t < s.T ? dsum[bt.pair * s.T + t] : 0.0f;
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  const int64_t keys = q0 + kTile < s.T ? q0 + kTile : s.T;
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();  // every warp is done with the previous ks, vs (and qs, dos are loaded)
    load_tile(ks, stride, k + base.kv, s.ld, j0, s.T, d);
    load_tile(vs, stride, v + base.kv, s.ld, j0, s.T, d);
    __syncthreads();
    float score[kRowsPerWarp], dp[kRowsPerWarp];
    row_dots(score, qs + r0 * d, ks + lane * stride, d);
    row_dots(dp, dos + r0 * d, vs + lane * stride, d);
    const int64_t j = j0 + lane;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const bool seen = j <= q0 + r0 + r;
      const float p = seen ? expf(score[r] * s.scale - row_lse[r]) : 0.0f;
      score[r] = seen ? p * (dp[r] - row_d[r]) : 0.0f;  // dS
    }
    add_weighted_rows(acc, score, ks, stride, d);  // dQ += dS · K
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t t = q0 + r0 + r;
    if (t >= s.T) continue;
    Act* g = dq + base.q + t * s.ld;
    for (int c = 0; c < kCols; ++c) {
      const int e = lane + c * kWarpSize;
      if (e < d) store(g + e, acc[r][c] * s.scale);
    }
  }
}

// dK, dV, one block per (kv pair, 32 keys), over the query heads of its group in order and
// for each the query tiles that see them (queries >= the first key): dV = Σ P^T · dO,
// dK = Σ dS^T · Q / sqrt(d). A warp owns 4 keys; lane i is query row i of the current query
// tile for the scores.
// Shared: ks, vs (32, d) the block's keys and values; qs, dos (32, odd) one query tile;
// lse_s, d_s (32) its rows' lse and D.
template <int kCols, int kD, typename Act>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Act* dk, Act* dv, const Act* dout, const float* lse, const float* dsum, const Act* q, const Act* k,
                const Act* v, Shape s) {
  extern __shared__ float smem[];
  const int d = kD > 0 ? kD : s.d, stride = odd_stride(d);
  float* ks = smem;
  float* vs = ks + kTile * d;
  float* qs = vs + kTile * d;
  float* dos = qs + kTile * stride;
  float* lse_s = dos + kTile * stride;
  float* d_s = lse_s + kTile;
  const BlockTile bt = block_tile(s, s.kv_pairs, false);  // rank 0 = the first keys, seen by the most queries
  const int64_t pair0 = first_query_pair(s, bt.pair);
  const int64_t kv_base = pair_base(s, pair0).kv;
  const int64_t k0 = bt.tile * kTile;
  const int lane = threadIdx.x % kWarpSize, r0 = threadIdx.x / kWarpSize * kRowsPerWarp;  // keys k0+r0 ..
  load_tile(ks, d, k + kv_base, s.ld, k0, s.T, d);
  load_tile(vs, d, v + kv_base, s.ld, k0, s.T, d);
  float acc_k[kRowsPerWarp][kCols], acc_v[kRowsPerWarp][kCols];
  for (int r = 0; r < kRowsPerWarp; ++r)
    for (int c = 0; c < kCols; ++c) acc_k[r][c] = acc_v[r][c] = 0.0f;
  for (int64_t pair = pair0; pair < pair0 + s.group; ++pair)
    for (int64_t q0 = k0; q0 < s.T; q0 += kTile) {
      const PairBase base = pair_base(s, pair);
      __syncthreads();  // every warp is done with the previous query tile (and ks, vs are loaded)
      load_tile(qs, stride, q + base.q, s.ld, q0, s.T, d);
      load_tile(dos, stride, dout + base.out, s.h * d, q0, s.T, d);
      if (threadIdx.x < kTile) {
        const int64_t t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < s.T ? lse[pair * s.T + t] : 0.0f;
        d_s[threadIdx.x] = t < s.T ? dsum[pair * s.T + t] : 0.0f;
      }
      __syncthreads();
      float p[kRowsPerWarp], ds[kRowsPerWarp];  // of the warp's keys against this lane's query
      row_dots(p, ks + r0 * d, qs + lane * stride, d);
      row_dots(ds, vs + r0 * d, dos + lane * stride, d);
      const int64_t t = q0 + lane;  // this lane's query
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const bool seen = k0 + r0 + r <= t && t < s.T;
        p[r] = seen ? expf(p[r] * s.scale - lse_s[lane]) : 0.0f;
        ds[r] = seen ? p[r] * (ds[r] - d_s[lane]) : 0.0f;
      }
      add_weighted_rows(acc_v, p, dos, stride, d);  // dV += P^T · dO
      add_weighted_rows(acc_k, ds, qs, stride, d);  // dK += dS^T · Q
    }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = k0 + r0 + r;
    if (j >= s.T) continue;
    for (int c = 0; c < kCols; ++c) {
      const int e = lane + c * kWarpSize;
      if (e >= d) continue;
      store(dk + kv_base + j * s.ld + e, acc_k[r][c] * s.scale);
      store(dv + kv_base + j * s.ld + e, acc_v[r][c]);
    }
  }
}

// The instantiation for head size d: d = 64 fixed at compile time (GPT-2's head size), else
// ceil(d/32) columns per lane.
template <typename Kernel>
Kernel pick(int64_t d, Kernel fixed64, Kernel cols1, Kernel cols2, Kernel cols3, Kernel cols4) {
  if (d == 64) return fixed64;
  switch ((d + kWarpSize - 1) / kWarpSize) {
    case 1:
      return cols1;
    case 2:
      return cols2;
    case 3:
      return cols3;
    default:
      return cols4;
  }
}

}  // namespace

void attention_tiles::attention_row_dots(const Context& ctx, const char* op, float* dsum, ConstActPtr dout,
                                         ConstActPtr out, const Shape& s) {
  const int64_t rows = s.pairs * s.T;
  const unsigned blocks = grid_dim(op, "attention rows", (rows + kWarpsPerBlock - 1) / kWarpsPerBlock, true);
  with_storage(common_type(op, {dout, out}), [&](auto storage) {
    using Act = decltype(storage);
    row_dot_kernel<Act><<<blocks, kThreads, 0, ctx.stream>>>(dsum, typed<Act>(dout), typed<Act>(out), rows, s);
  });
  check_launch(ctx, op);
}

namespace {

// The bf16 GEMM math runs attention on tensor cores too (attention_bf16.hpp).
bool on_tensor_cores(const Context& ctx) { return ctx.gemm != nullptr && ctx.gemm->math() == GemmMath::bf16; }

}  // namespace

void attention_forward(const Context& ctx, ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  const char* op = "attention_forward";
  require_shape(op, ld, B, T, h, kv, d, group_stride);
  const ElementType type = common_type(op, {out, q, k, v});
  if (B == 0 || T == 0 || h == 0) return;
  if (on_tensor_cores(ctx)) return attention_forward_bf16(ctx, out, lse, q, k, v, ld, B, T, h, kv, d, group_stride);
  const Shape s = shape_of(ld, B, T, h, kv, d, group_stride, kTile);
  const size_t shared = static_cast<size_t>(kTile) * (2 * d + odd_stride(s.d)) * sizeof(float);
  with_storage(type, [&](auto storage) {
    using Act = decltype(storage);
    launch(ctx, op,
           pick(d, forward_kernel<2, 64, Act>, forward_kernel<1, 0, Act>, forward_kernel<2, 0, Act>,
                forward_kernel<3, 0, Act>, forward_kernel<4, 0, Act>),
           tile_blocks(op, s, s.pairs), kThreads, shared, typed<Act>(out), lse, typed<Act>(q), typed<Act>(k),
           typed<Act>(v), s);
  });
}

void attention_backward(const Context& ctx, ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out,
                        const float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B, int64_t T,
                        int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  const char* op = "attention_backward";
  require_shape(op, ld, B, T, h, kv, d, group_stride);
  const ElementType type = common_type(op, {dq, dk, dv, dout, out, q, k, v});
  if (B == 0 || T == 0 || h == 0) return;
  if (on_tensor_cores(ctx))
    return attention_backward_bf16(ctx, dq, dk, dv, dout, out, lse, q, k, v, ld, B, T, h, kv, d, group_stride);
  const Shape s = shape_of(ld, B, T, h, kv, d, group_stride, kTile);
  auto* dsum = static_cast<float*>(ctx.scratch->get(ctx.stream, static_cast<size_t>(B * h * T) * sizeof(float), op));
  attention_row_dots(ctx, op, dsum, dout, out, s);
  const int64_t tile = kTile * d, odd_tile = static_cast<int64_t>(kTile) * odd_stride(s.d);
  const size_t dkdv_shared = static_cast<size_t>(2 * tile + 2 * odd_tile + 2 * kTile) * sizeof(float);
  const size_t dq_shared = static_cast<size_t>(2 * tile + 2 * odd_tile) * sizeof(float);
  const float* sums = dsum;
  with_storage(type, [&](auto storage) {
    using Act = decltype(storage);
    const Act *pq = typed<Act>(q), *pk = typed<Act>(k), *pv = typed<Act>(v), *pdout = typed<Act>(dout);
    launch(ctx, op,
           pick(d, dkdv_kernel<2, 64, Act>, dkdv_kernel<1, 0, Act>, dkdv_kernel<2, 0, Act>, dkdv_kernel<3, 0, Act>,
                dkdv_kernel<4, 0, Act>),
           tile_blocks(op, s, s.kv_pairs), kThreads, dkdv_shared, typed<Act>(dk), typed<Act>(dv), pdout, lse, sums, pq,
           pk, pv, s);
    launch(ctx, op,
           pick(d, dq_kernel<2, 64, Act>, dq_kernel<1, 0, Act>, dq_kernel<2, 0, Act>, dq_kernel<3, 0, Act>,
                dq_kernel<4, 0, Act>),
           tile_blocks(op, s, s.pairs), kThreads, dq_shared, typed<Act>(dq), pdout, lse, sums, pq, pk, pv, s);
  });
}

}  // namespace axonn::cuda
