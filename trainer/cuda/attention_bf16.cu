#include <cuda_bf16.h>
#include <mma.h>

#include <initializer_list>
#include <type_traits>

#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/attention_bf16.hpp"
#include "trainer/cuda/attention_tiles.cuh"
#include "trainer/cuda/device_math.cuh"

namespace axonn::cuda {
namespace {

using namespace attention_tiles;
namespace wmma = nvcuda::wmma;

constexpr int kWarps = 8;
constexpr int kBlockThreads = kWarps * kWarpSize;
constexpr int kFrag = 16;                   // a WMMA product is 16×16×16
constexpr int kBlockRows = kWarps * kFrag;  // 128 rows per block, 16 per warp
constexpr int kTile = 64;                   // rows of the other side per step
constexpr int kTileFrags = kTile / kFrag;
constexpr int kHalfTile = kTile / 2;  // score columns per lane: two lanes share a row

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBTransposed = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// Shared-memory strides for the head size padded to kDp, and the sizes of the regions.
// WMMA wants every fragment pointer on a 32-byte boundary and ldm a multiple of 16 bytes:
// all sizes below are multiples of 32 bytes, and the fragment offsets multiples of 16 rows
// or 16 columns.
template <int kDp>
struct Smem {
  static constexpr int kLdTile = kDp + 8;  // bf16 (rows, kDp) tiles; the 8 keeps rows off the same banks
  static constexpr int kLdP = kTile + 8;   // bf16 (16, 64) per warp: P or dS
  static constexpr int kLdF = (kTile > kDp ? kTile : kDp) + 4;  // float (16, ·) per warp: a product
  static constexpr size_t tile_bytes(int rows) { return static_cast<size_t>(rows) * kLdTile * sizeof(bf16); }
  static constexpr size_t kPBytes = static_cast<size_t>(kWarps) * kFrag * kLdP * sizeof(bf16);
  static constexpr size_t kFBytes = static_cast<size_t>(kWarps) * kFrag * kLdF * sizeof(float);
  static_assert(kLdTile * sizeof(bf16) % 16 == 0 && kLdP * sizeof(bf16) % 16 == 0 && kLdF * sizeof(float) % 16 == 0,
                "WMMA ldm is a multiple of 16 bytes");
  static_assert(tile_bytes(kFrag) % 32 == 0 && kPBytes % 32 == 0 && kFBytes % 32 == 0,
                "every region and every 16-row fragment starts on a 32-byte boundary");
};

// Byte offsets of each kernel's regions in its dynamic shared memory.
template <int kDp>
struct ForwardLayout {  // qs (128, kDp) the block's queries; ks, vs (64, kDp) one key tile
  using S = Smem<kDp>;
  static constexpr size_t q = 0, k = q + S::tile_bytes(kBlockRows), v = k + S::tile_bytes(kTile),
                          p = v + S::tile_bytes(kTile), f = p + S::kPBytes, bytes = f + S::kFBytes;
};
template <int kDp>
struct KeyValueLayout {  // ks, vs (128, kDp) the block's keys; qs, dos (64, kDp) one query tile, its lse and D
  using S = Smem<kDp>;
  static constexpr size_t k = 0, v = k + S::tile_bytes(kBlockRows), q = v + S::tile_bytes(kBlockRows),
                          dout = q + S::tile_bytes(kTile), p = dout + S::tile_bytes(kTile), f = p + S::kPBytes,
                          lse = f + S::kFBytes, dsum = lse + kTile * sizeof(float),
                          bytes = dsum + kTile * sizeof(float);
};
template <int kDp>
struct QueryGradLayout {  // qs, dos (128, kDp) the block's queries; ks, vs (64, kDp) one key tile
  using S = Smem<kDp>;
  static constexpr size_t q = 0, dout = q + S::tile_bytes(kBlockRows), k = dout + S::tile_bytes(kBlockRows),
                          v = k + S::tile_bytes(kTile), p = v + S::tile_bytes(kTile), f = p + S::kPBytes,
                          bytes = f + S::kFBytes;
};

// A warp's view of shared memory and of its 16 rows: lanes 2r and 2r + 1 own row r, one
// half of its columns each (score columns [32·half, 32·half + 32), head columns
// [half·kDp/2, (half + 1)·kDp/2)).
template <int kDp>
struct WarpPart {
  int warp, row, half;
  bf16* p;   // (16, 64) bf16, row stride kLdP: P or dS for the second product
  float* f;  // (16, ·) float, row stride kLdF: a product read back by the lanes

  __device__ WarpPart(unsigned char* smem, size_t p_offset, size_t f_offset)
      : warp(threadIdx.x / kWarpSize),
        row(threadIdx.x % kWarpSize / 2),
        half(threadIdx.x % 2),
        p(reinterpret_cast<bf16*>(smem + p_offset) + warp * kFrag * Smem<kDp>::kLdP),
        f(reinterpret_cast<float*>(smem + f_offset) + warp * kFrag * Smem<kDp>::kLdF) {}

  __device__ float* f_scores() const { return f + row * Smem<kDp>::kLdF + half * kHalfTile; }
  __device__ bf16* p_scores() const { return p + row * Smem<kDp>::kLdP + half * kHalfTile; }
  __device__ float* f_head() const { return f + row * Smem<kDp>::kLdF + half * (kDp / 2); }
  __device__ int head_column0() const { return half * (kDp / 2); }
};

__device__ bf16* tile_at(unsigned char* smem, size_t offset) { return reinterpret_cast<bf16*>(smem + offset); }

// Where the kernels read one tensor's bf16 rows of kDp elements (16-byte aligned rows):
// its packed copy, (B·h, T, kDp) pair after pair, or the activations themselves when they
// are bf16 with d = kDp, the (B, T, h, d) view with row stride ld (no pack pass).
struct RowSource {
  const bf16* data;
  int64_t ld;  // row stride in elements; kDp when packed
  bool packed;
};

// Row 0 of one (sequence, head) pair's T rows in `src`.
__device__ const bf16* pair_rows(const RowSource& src, const Shape& s, int64_t pair) {
  if (src.packed) return src.data + pair * s.T * src.ld;
  const int64_t b = pair / s.h, head = pair - b * s.h;
  return src.data + b * s.T * src.ld + head * s.d;
}

// Rows [0, rows) of dst (row stride kLdTile) = rows row0, row0 + 1, ... of a pair's rows
// (row stride ld), zero for rows at or past T: 16-byte copies (8 bf16), consecutive threads
// on consecutive chunks. Every thread of the block takes part.
template <int kDp>
__device__ void stage_rows(bf16* dst, int rows, const bf16* src, int64_t ld, int64_t row0, int64_t T) {
  constexpr int kChunks = kDp / 8;
  for (int i = threadIdx.x; i < rows * kChunks; i += kBlockThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t at = row0 + r;
    const uint4 chunk = at < T ? reinterpret_cast<const uint4*>(src + at * ld)[c] : make_uint4(0, 0, 0, 0);
    reinterpret_cast<uint4*>(dst + r * Smem<kDp>::kLdTile)[c] = chunk;
  }
}

// dst (B·h, T, dp) = the (B, T, h, d) view at src (row stride ld) rounded to bf16, one pair's
// rows after another, columns d .. dp zero. Act: the activations' storage (act_storage.cuh).
template <typename Act>
__global__ void pack_kernel(bf16* dst, const Act* src, int64_t ld, int64_t T, int64_t h, int d, int dp, int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t row = i / dp, pair = row / T, t = row - pair * T, b = pair / h, head = pair - b * h;
    const int e = static_cast<int>(i - row * dp);
    store(dst + i, e < d ? load(src + (b * T + t) * ld + head * d + e) : 0.0f);
  }
}

template <int N>
__device__ void zero_fragments(FragAcc (&acc)[N]) {
  for (int n = 0; n < N; ++n) wmma::fill_fragment(acc[n], 0.0f);
}

// acc[n] = a · b^T for a (16, kDp) and b (64, kDp), both bf16 tiles in shared memory: the
// 16×64 products of a's rows with b's rows, as 4 fragments of 16 columns.
template <int kDp>
__device__ void multiply_transposed(FragAcc (&acc)[kTileFrags], const bf16* a, const bf16* b) {
  constexpr int ld = Smem<kDp>::kLdTile;
  zero_fragments(acc);
#pragma unroll
  for (int kk = 0; kk < kDp / kFrag; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + kk * kFrag, ld);
#pragma unroll
    for (int n = 0; n < kTileFrags; ++n) {
      FragBTransposed fb;
      wmma::load_matrix_sync(fb, b + n * kFrag * ld + kk * kFrag, ld);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// acc[n] += p · b for the warp's p (16, 64) and a bf16 tile b (64, kDp): kDp/16 fragments.
template <int kDp>
__device__ void multiply_accumulate(FragAcc (&acc)[kDp / kFrag], const bf16* p, const bf16* b) {
  constexpr int ld = Smem<kDp>::kLdTile;
#pragma unroll
  for (int kk = 0; kk < kTileFrags; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, p + kk * kFrag, Smem<kDp>::kLdP);
#pragma unroll
    for (int n = 0; n < kDp / kFrag; ++n) {
      FragB fb;
      wmma::load_matrix_sync(fb, b + kk * kFrag * ld + n * kFrag, ld);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// The warp's f (16, 16·N) = the fragments side by side. The lanes read it after __syncwarp.
template <int kDp, int N>
__device__ void store_fragments(float* f, const FragAcc (&acc)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) wmma::store_matrix_sync(f + n * kFrag, acc[n], Smem<kDp>::kLdF, wmma::mem_row_major);
}

// Writes the warp's (16, kDp) fragments times `scale` to rows row0 .. row0 + 15 (those below
// T) of a (T, d) view at dst (row stride ld), through the warp's f.
template <int kDp, typename Act>
__device__ void write_rows(const WarpPart<kDp>& w, const FragAcc (&acc)[kDp / kFrag], float scale, Act* dst, int64_t ld,
                           int64_t row0, int64_t T, int d) {
  store_fragments<kDp>(w.f, acc);
  __syncwarp();
  const int64_t at = row0 + w.row;
  if (at < T) {
    const float* f = w.f_head();
    for (int i = 0; i < kDp / 2; ++i) {
      const int e = w.head_column0() + i;
      if (e < d) store(dst + at * ld + e, f[i] * scale);
    }
  }
  __syncwarp();  // f is free again
}

// The block's 128 query rows, for the forward and dQ kernels: its (pair, tile), where the
// pair starts in the float32 views, the block's and the warp's first row, and this lane's row.
struct QueryRows {
  BlockTile bt;
  PairBase base;
  int64_t q0, warp_row0, t;
  __device__ QueryRows(const Shape& s, int warp, int row)
      : bt(block_tile(s, true)),
        base(pair_base(s, bt.pair)),
        q0(bt.tile * kBlockRows),
        warp_row0(q0 + warp * kFrag),
        t(warp_row0 + row) {}
};

// Forward, one block per (pair, 128 query rows), over the key tiles of 64 the rows see.
template <int kDp, typename Act>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(Act* out, float* lse, RowSource q, RowSource k, RowSource v, Shape s) {
  using L = ForwardLayout<kDp>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *qs = tile_at(smem, L::q), *ks = tile_at(smem, L::k), *vs = tile_at(smem, L::v);
  const WarpPart<kDp> w(smem, L::p, L::f);
  const QueryRows rows(s, w.warp, w.row);
  const int64_t q0 = rows.q0, warp_row0 = rows.warp_row0, t = rows.t;
  const bf16 *pair_k = pair_rows(k, s, rows.bt.pair), *pair_v = pair_rows(v, s, rows.bt.pair);
  stage_rows<kDp>(qs, kBlockRows, pair_rows(q, s, rows.bt.pair), q.ld, q0, s.T);
  float o[kDp / 2];
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float row_max = neg_inf(), row_sum = 0.0f;
  const int64_t keys = q0 + kBlockRows < s.T ? q0 + kBlockRows : s.T;  // the block's rows see keys < keys
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();  // every warp is done with the previous ks, vs (and qs is staged)
    stage_rows<kDp>(ks, kTile, pair_k, k.ld, j0, s.T);
    stage_rows<kDp>(vs, kTile, pair_v, v.ld, j0, s.T);
    __syncthreads();
    // Skip a tile none of the warp's rows sees, and rows past T. Otherwise j0 <= the warp's
    // first row, so key j0 is seen by every row and the new max is finite.
    if (j0 > warp_row0 || warp_row0 >= s.T) continue;
    FragAcc scores[kTileFrags];
    multiply_transposed<kDp>(scores, qs + w.warp * kFrag * Smem<kDp>::kLdTile, ks);
    store_fragments<kDp>(w.f, scores);
    __syncwarp();
    float p[kHalfTile], tile_max = neg_inf();
    const float* f = w.f_scores();
    const int64_t key0 = j0 + w.half * kHalfTile;
    for (int i = 0; i < kHalfTile; ++i) {
      p[i] = key0 + i <= t ? f[i] * s.scale : neg_inf();
      tile_max = fmaxf(tile_max, p[i]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    const float new_max = fmaxf(row_max, tile_max), alpha = expf(row_max - new_max);  // 0 on the first tile
    float sum = 0.0f;
    bf16* p_row = w.p_scores();
    for (int i = 0; i < kHalfTile; ++i) {
      p[i] = expf(p[i] - new_max);
      sum += p[i];
      p_row[i] = __float2bfloat16_rn(p[i]);
    }
    row_sum = row_sum * alpha + sum + __shfl_xor_sync(kFullMask, sum, 1);
    row_max = new_max;
    for (int i = 0; i < kDp / 2; ++i) o[i] *= alpha;
    __syncwarp();  // P is written and f is read
    FragAcc pv[kDp / kFrag];
    zero_fragments(pv);
    multiply_accumulate<kDp>(pv, w.p, vs);  // P · V
    store_fragments<kDp>(w.f, pv);
    __syncwarp();
    const float* f_head = w.f_head();
    for (int i = 0; i < kDp / 2; ++i) o[i] += f_head[i];
  }
  if (t < s.T) {
    const float inv = 1.0f / row_sum;
    Act* row = out + rows.base.out + t * s.h * s.d;
    for (int i = 0; i < kDp / 2; ++i) {
      const int e = w.head_column0() + i;
      if (e < s.d) store(row + e, o[i] * inv);
    }
    if (w.half == 0) lse[rows.bt.pair * s.T + t] = row_max + logf(row_sum);
  }
}

// dK, dV, one block per (pair, 128 keys), over the query tiles of 64 that see them:
// dV = Σ P^T · dO, dK = Σ dS^T · Q / sqrt(d), dS = P ⊙ (dP − D), P = exp(Q·K^T/sqrt(d) − lse).
// A warp computes its keys' transposed scores S^T (16 keys, 64 queries) directly.
template <int kDp, typename Act>
__global__ void __launch_bounds__(kBlockThreads)
    dkdv_kernel(Act* dk, Act* dv, RowSource dout, const float* lse, const float* dsum, RowSource q, RowSource k,
                RowSource v, Shape s) {
  using L = KeyValueLayout<kDp>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *ks = tile_at(smem, L::k), *vs = tile_at(smem, L::v);
  bf16 *qs = tile_at(smem, L::q), *dos = tile_at(smem, L::dout);
  float* lse_s = reinterpret_cast<float*>(smem + L::lse);
  float* d_s = reinterpret_cast<float*>(smem + L::dsum);
  const WarpPart<kDp> w(smem, L::p, L::f);
  const BlockTile bt = block_tile(s, false);  // rank 0 = the first keys, seen by the most queries
  const PairBase base = pair_base(s, bt.pair);
  const int64_t k0 = bt.tile * kBlockRows, warp_key0 = k0 + w.warp * kFrag, j = warp_key0 + w.row;
  const bf16 *pair_q = pair_rows(q, s, bt.pair), *pair_dout = pair_rows(dout, s, bt.pair);
  stage_rows<kDp>(ks, kBlockRows, pair_rows(k, s, bt.pair), k.ld, k0, s.T);
  stage_rows<kDp>(vs, kBlockRows, pair_rows(v, s, bt.pair), v.ld, k0, s.T);
  FragAcc dk_acc[kDp / kFrag], dv_acc[kDp / kFrag];
  zero_fragments(dk_acc);
  zero_fragments(dv_acc);
  const bf16* warp_ks = ks + w.warp * kFrag * Smem<kDp>::kLdTile;
  const bf16* warp_vs = vs + w.warp * kFrag * Smem<kDp>::kLdTile;
  for (int64_t q0 = k0; q0 < s.T; q0 += kTile) {
    __syncthreads();  // every warp is done with the previous query tile (and ks, vs are staged)
    stage_rows<kDp>(qs, kTile, pair_q, q.ld, q0, s.T);
    stage_rows<kDp>(dos, kTile, pair_dout, dout.ld, q0, s.T);
    if (threadIdx.x < kTile) {
      const int64_t t = q0 + threadIdx.x;
      lse_s[threadIdx.x] = t < s.T ? lse[bt.pair * s.T + t] : 0.0f;
      d_s[threadIdx.x] = t < s.T ? dsum[bt.pair * s.T + t] : 0.0f;
    }
    __syncthreads();
    if (q0 + kTile <= warp_key0 || warp_key0 >= s.T) continue;  // no query of the tile sees the warp's keys
    FragAcc prod[kTileFrags];
    multiply_transposed<kDp>(prod, warp_ks, qs);  // S^T
    store_fragments<kDp>(w.f, prod);
    __syncwarp();
    float p[kHalfTile];
    const float* f = w.f_scores();
    bf16* p_row = w.p_scores();
    const int col0 = w.half * kHalfTile;
    for (int i = 0; i < kHalfTile; ++i) {
      const int64_t t = q0 + col0 + i;
      p[i] = j <= t && t < s.T ? expf(f[i] * s.scale - lse_s[col0 + i]) : 0.0f;
      p_row[i] = __float2bfloat16_rn(p[i]);
    }
    __syncwarp();
    multiply_accumulate<kDp>(dv_acc, w.p, dos);    // dV += P^T · dO
    multiply_transposed<kDp>(prod, warp_vs, dos);  // dP^T = V · dO^T
    store_fragments<kDp>(w.f, prod);
    __syncwarp();  // f is written, and every lane has read P for dV: p is free for dS
    for (int i = 0; i < kHalfTile; ++i) p_row[i] = __float2bfloat16_rn(p[i] * (f[i] - d_s[col0 + i]));
    __syncwarp();
    multiply_accumulate<kDp>(dk_acc, w.p, qs);  // dK += dS^T · Q
  }
  write_rows(w, dk_acc, s.scale, dk + base.qkv, s.ld, warp_key0, s.T, s.d);
  write_rows(w, dv_acc, 1.0f, dv + base.qkv, s.ld, warp_key0, s.T, s.d);
}

// dQ, one block per (pair, 128 query rows), over the key tiles of 64 the rows see:
// dQ = Σ dS · K / sqrt(d).
template <int kDp, typename Act>
__global__ void __launch_bounds__(kBlockThreads) dq_kernel(Act* dq, RowSource dout, const float* lse, const float* dsum,
                                                           RowSource q, RowSource k, RowSource v, Shape s) {
  using L = QueryGradLayout<kDp>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *qs = tile_at(smem, L::q), *dos = tile_at(smem, L::dout);
  bf16 *ks = tile_at(smem, L::k), *vs = tile_at(smem, L::v);
  const WarpPart<kDp> w(smem, L::p, L::f);
  const QueryRows rows(s, w.warp, w.row);
  const int64_t q0 = rows.q0, warp_row0 = rows.warp_row0, t = rows.t, pair = rows.bt.pair;
  const bf16 *pair_k = pair_rows(k, s, pair), *pair_v = pair_rows(v, s, pair);
  stage_rows<kDp>(qs, kBlockRows, pair_rows(q, s, pair), q.ld, q0, s.T);
  stage_rows<kDp>(dos, kBlockRows, pair_rows(dout, s, pair), dout.ld, q0, s.T);
  const float row_lse = t < s.T ? lse[pair * s.T + t] : 0.0f;
  const float row_d = t < s.T ? dsum[pair * s.T + t] : 0.0f;
  FragAcc dq_acc[kDp / kFrag];
  zero_fragments(dq_acc);
  const bf16* warp_qs = qs + w.warp * kFrag * Smem<kDp>::kLdTile;
  const bf16* warp_dos = dos + w.warp * kFrag * Smem<kDp>::kLdTile;
  const int64_t keys = q0 + kBlockRows < s.T ? q0 + kBlockRows : s.T;
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();  // every warp is done with the previous ks, vs (and qs, dos are staged)
    stage_rows<kDp>(ks, kTile, pair_k, k.ld, j0, s.T);
    stage_rows<kDp>(vs, kTile, pair_v, v.ld, j0, s.T);
    __syncthreads();
    if (j0 > warp_row0 || warp_row0 >= s.T) continue;
    FragAcc prod[kTileFrags];
    multiply_transposed<kDp>(prod, warp_qs, ks);  // S
    store_fragments<kDp>(w.f, prod);
    __syncwarp();
    float p[kHalfTile];
    const float* f = w.f_scores();
    const int64_t key0 = j0 + w.half * kHalfTile;
    for (int i = 0; i < kHalfTile; ++i) p[i] = key0 + i <= t ? expf(f[i] * s.scale - row_lse) : 0.0f;
    __syncwarp();
    multiply_transposed<kDp>(prod, warp_dos, vs);  // dP = dO · V^T
    store_fragments<kDp>(w.f, prod);
    __syncwarp();
    bf16* p_row = w.p_scores();
    for (int i = 0; i < kHalfTile; ++i) p_row[i] = __float2bfloat16_rn(p[i] * (f[i] - row_d));
    __syncwarp();
    multiply_accumulate<kDp>(dq_acc, w.p, ks);  // dQ += dS · K
  }
  write_rows(w, dq_acc, s.scale, dq + rows.base.qkv, s.ld, warp_row0, s.T, s.d);
}

// Calls f(std::integral_constant<int, kDp>) for d padded to a multiple of 32 (d <= 128).
template <typename F>
void with_padded_head(int64_t d, F f) {
  if (d <= 32)
    f(std::integral_constant<int, 32>{});
  else if (d <= 64)
    f(std::integral_constant<int, 64>{});
  else if (d <= 96)
    f(std::integral_constant<int, 96>{});
  else
    f(std::integral_constant<int, 128>{});
}

// The activations can be read in place when they are bf16 rows of kDp elements on 16-byte
// boundaries (GPT-2's d = 64 in bf16 storage); else they are packed first.
bool reads_in_place(ConstActPtr src, int64_t ld, int64_t d, int dp) {
  return src.type() == ElementType::bfloat16 && d == dp && ld % 8 == 0 &&
         reinterpret_cast<uintptr_t>(src.raw()) % 16 == 0;
}

// Packs src into dst (B·h, T, dp) bf16 (pack_kernel).
void pack(const Context& ctx, const char* op, bf16* dst, ConstActPtr src, int64_t ld, const Shape& s, int dp) {
  const int64_t total = s.pairs * s.T * dp;
  with_storage(src.type(), [&](auto storage) {
    using Act = decltype(storage);
    pack_kernel<Act><<<grid_for(total), kThreads, 0, ctx.stream>>>(dst, typed<Act>(src), ld, s.T, s.h, s.d, dp, total);
  });
  check_launch(ctx, op);
}

// One input of the kernels as the backend got it: a (B, T, h, d) view with row stride ld.
struct View {
  ConstActPtr data;
  int64_t ld;
};

// The kernels' sources for q, k, v (and dout), in order: each read in place or packed, the
// packs in one scratch request (B·h·T·dp·2 bytes each) with D (B·h·T floats) when with_dsum.
struct Sources {
  RowSource rows[4] = {};
  float* dsum = nullptr;
};
Sources take_sources(const Context& ctx, const char* op, const Shape& s, int dp, std::initializer_list<View> views,
                     bool with_dsum) {
  const size_t pack_bytes = static_cast<size_t>(s.pairs * s.T * dp) * sizeof(bf16);
  Sources out;
  ScratchLayout layout;
  size_t at[4] = {};
  int i = 0;
  for (const View& v : views) {
    out.rows[i].packed = !reads_in_place(v.data, v.ld, s.d, dp);
    at[i] = layout.add(out.rows[i].packed ? pack_bytes : 0);
    ++i;
  }
  const size_t dsum_at = layout.add(with_dsum ? static_cast<size_t>(s.pairs * s.T) * sizeof(float) : 0);
  auto* base = static_cast<char*>(ctx.scratch->get(ctx.stream, layout.total(), op));
  i = 0;
  for (const View& v : views) {
    RowSource& rows = out.rows[i];
    if (rows.packed) {
      auto* packed = reinterpret_cast<bf16*>(base + at[i]);
      pack(ctx, op, packed, v.data, v.ld, s, dp);
      rows = {packed, dp, true};
    } else {
      rows = {static_cast<const bf16*>(v.data.raw()), v.ld, false};
    }
    ++i;
  }
  if (with_dsum) out.dsum = reinterpret_cast<float*>(base + dsum_at);
  return out;
}

}  // namespace

void attention_forward_bf16(const Context& ctx, ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v,
                            int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d) {
  const char* op = "attention_forward";
  const Shape s = shape_of(ld, B, T, h, d, kBlockRows);
  with_padded_head(d, [&](auto dp) {
    constexpr int kDp = decltype(dp)::value;
    const Sources in = take_sources(ctx, op, s, kDp, {{q, ld}, {k, ld}, {v, ld}}, false);
    with_storage(out.type(), [&](auto storage) {
      using Act = decltype(storage);
      launch(ctx, op, forward_kernel<kDp, Act>, tile_blocks(op, s), kBlockThreads, ForwardLayout<kDp>::bytes,
             typed<Act>(out), lse, in.rows[0], in.rows[1], in.rows[2], s);
    });
  });
}

void attention_backward_bf16(const Context& ctx, ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out,
                             const float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B,
                             int64_t T, int64_t h, int64_t d) {
  const char* op = "attention_backward";
  const Shape s = shape_of(ld, B, T, h, d, kBlockRows);
  with_padded_head(d, [&](auto dp) {
    constexpr int kDp = decltype(dp)::value;
    const Sources in = take_sources(ctx, op, s, kDp, {{q, ld}, {k, ld}, {v, ld}, {dout, h * d}}, true);
    attention_row_dots(ctx, op, in.dsum, dout, out, s);
    const RowSource pq = in.rows[0], pk = in.rows[1], pv = in.rows[2], pdout = in.rows[3];
    const float* dsum = in.dsum;
    with_storage(dq.type(), [&](auto storage) {
      using Act = decltype(storage);
      launch(ctx, op, dkdv_kernel<kDp, Act>, tile_blocks(op, s), kBlockThreads, KeyValueLayout<kDp>::bytes,
             typed<Act>(dk), typed<Act>(dv), pdout, lse, dsum, pq, pk, pv, s);
      launch(ctx, op, dq_kernel<kDp, Act>, tile_blocks(op, s), kBlockThreads, QueryGradLayout<kDp>::bytes,
             typed<Act>(dq), pdout, lse, dsum, pq, pk, pv, s);
    });
  });
}

}  // namespace axonn::cuda
