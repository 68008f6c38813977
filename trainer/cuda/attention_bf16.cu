#include <cuda_bf16.h>

#include <initializer_list>
#include <type_traits>

#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/async_copy.cuh"
#include "trainer/cuda/attention_bf16.hpp"
#include "trainer/cuda/attention_tiles.cuh"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/warp_mma.cuh"

namespace axonn::cuda {
namespace {

using namespace attention_tiles;

constexpr int kWarps = 8;
constexpr int kBlockThreads = kWarps * kWarpSize;
constexpr int kWarpRows = 16;                   // an mma's M: a warp owns 16 rows
constexpr int kBlockRows = kWarps * kWarpRows;  // 128 rows per block
constexpr int kTile = 64;                       // rows of the other side per step
constexpr int kTileSteps = kTile / 16;          // a 16 × 64 product as the A operand: 4 k-steps of 16
// The softmax runs in base 2, as FlashAttention's: exp(x) = exp2(x·log2(e)), the factor folded
// into the score scale, so each probability is one FMA and one exp2.
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Shared-memory tiles are bf16 (rows, kDp) with row stride kDp + 8: ldmatrix reads eight
// 16-byte rows at once, and the 16-byte pad puts those on eight different groups of banks.
template <int kDp>
constexpr int kLd = kDp + 8;
template <int kDp>
constexpr size_t tile_bytes(int rows) {
  return static_cast<size_t>(rows) * kLd<kDp> * sizeof(bf16);
}

// The loops over tiles of 64 rows are double-buffered: tile i + 1's async copies
// (async_copy.cuh) are in flight while the warps compute on tile i, so the loads' latency
// hides behind the tensor cores instead of stalling the block at every tile.
constexpr int kBuffers = 2;

// Byte offsets of each kernel's regions in its dynamic shared memory (every region starts on
// a 16-byte boundary: a row is a multiple of 16 bytes).
template <int kDp>
struct ForwardLayout {  // qs (128, kDp) the block's queries; ks, vs 2 × (64, kDp) key tiles
  static constexpr size_t q = 0, k = q + tile_bytes<kDp>(kBlockRows), v = k + kBuffers * tile_bytes<kDp>(kTile),
                          bytes = v + kBuffers * tile_bytes<kDp>(kTile);
};
template <int kDp>
struct KeyValueLayout {  // ks, vs (128, kDp) the block's keys; qs, dos 2 × (64, kDp) query tiles; one tile's lse and D
  static constexpr size_t k = 0, v = k + tile_bytes<kDp>(kBlockRows), q = v + tile_bytes<kDp>(kBlockRows),
                          dout = q + kBuffers * tile_bytes<kDp>(kTile), lse = dout + kBuffers * tile_bytes<kDp>(kTile),
                          dsum = lse + kTile * sizeof(float), bytes = dsum + kTile * sizeof(float);
};
template <int kDp>
struct QueryGradLayout {  // qs, dos (128, kDp) the block's queries; ks, vs 2 × (64, kDp) key tiles
  static constexpr size_t q = 0, dout = q + tile_bytes<kDp>(kBlockRows), k = dout + tile_bytes<kDp>(kBlockRows),
                          v = k + kBuffers * tile_bytes<kDp>(kTile), bytes = v + kBuffers * tile_bytes<kDp>(kTile);
};

__device__ bf16* tile_at(unsigned char* smem, size_t offset) { return reinterpret_cast<bf16*>(smem + offset); }

// Buffer i % 2 of a double-buffered region of 64-row tiles: the one tile i uses.
template <int kDp>
__device__ bf16* buffer_for(bf16* tiles, int64_t i) {
  return tiles + (i % kBuffers) * kTile * kLd<kDp>;
}

// This lane's place in the mma layouts (warp_mma.cuh): group g holds rows g and g + 8 of a
// 16-row product, and columns 2t, 2t + 1 of each of its 8-column tiles.
struct Lane {
  int g, t;
  __device__ Lane() : g(threadIdx.x % kWarpSize / 4), t(threadIdx.x % 4) {}
  // The row (0 .. 15) and the column within its 8-column tile of accumulator element e.
  __device__ int row(int e) const { return g + (e / 2) * 8; }
  __device__ int column(int e) const { return 2 * t + e % 2; }
};

// A 16 × 16 block of a shared tile (row stride kLd) as ldmatrix's four 8 × 8 matrices, in the
// order (rows 0-7, columns 0-7), (rows 8-15, 0-7), (rows 0-7, 8-15), (rows 8-15, 8-15): the
// row this lane points at.
template <int kDp>
__device__ const bf16* x4_row(const bf16* block) {
  const int lane = threadIdx.x % kWarpSize, matrix = lane / 8;
  return block + (lane % 8 + 8 * (matrix % 2)) * kLd<kDp> + 8 * (matrix / 2);
}

// The A operands of 16 rows of a shared tile over all kDp columns: kDp/16 k-steps.
template <int kDp>
__device__ void load_a_rows(uint32_t (&a)[kDp / 16][4], const bf16* rows) {
#pragma unroll
  for (int kk = 0; kk < kDp / 16; ++kk) ldmatrix_x4(a[kk], x4_row<kDp>(rows + kk * 16));
}

// The B operands of two 8-column tiles (b[0]: columns 0-7, b[1]: 8-15) of a 16 × 16 block of
// B = (k, n) held in a shared tile either as B^T, a row per n (K in Q·K^T), or as B, a row
// per k (V in P·V, read transposed).
template <int kDp>
__device__ void load_b_n_rows(uint32_t (&b)[2][2], const bf16* block) {
  uint32_t r[4];
  ldmatrix_x4(r, x4_row<kDp>(block));
  b[0][0] = r[0], b[0][1] = r[2], b[1][0] = r[1], b[1][1] = r[3];
}
template <int kDp>
__device__ void load_b_k_rows(uint32_t (&b)[2][2], const bf16* block) {
  uint32_t r[4];
  ldmatrix_x4_trans(r, x4_row<kDp>(block));
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

template <int N>
__device__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
    for (float& e : acc[n]) e = 0.0f;
}

// lo += a · b[0], hi += a · b[1]: one A operand times two 8-column tiles of B.
__device__ void mma_two_tiles(float (&lo)[4], float (&hi)[4], const uint32_t (&a)[4], const uint32_t (&b)[2][2]) {
  mma_bf16_16x8x16(lo, a, b[0]);
  mma_bf16_16x8x16(hi, a, b[1]);
}

// acc (16 × 64: eight 8-column tiles) = a · tile^T for the warp's A operands a (16 × kDp) and
// a shared tile (64, kDp): the 16 × 64 products of a's rows with the tile's rows.
template <int kDp>
__device__ void multiply_transposed(float (&acc)[kTile / 8][4], const uint32_t (&a)[kDp / 16][4], const bf16* tile) {
  zero(acc);
#pragma unroll
  for (int kk = 0; kk < kDp / 16; ++kk)
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      uint32_t b[2][2];
      load_b_n_rows<kDp>(b, tile + n * 16 * kLd<kDp> + kk * 16);
      mma_two_tiles(acc[2 * n], acc[2 * n + 1], a[kk], b);
    }
}

// acc (16 × kDp: kDp/8 tiles) += p · tile for the A operands p of a 16 × 64 product and a
// shared tile (64, kDp).
template <int kDp>
__device__ void multiply_accumulate(float (&acc)[kDp / 8][4], const uint32_t (&p)[kTileSteps][4], const bf16* tile) {
#pragma unroll
  for (int kk = 0; kk < kTileSteps; ++kk)
#pragma unroll
    for (int n = 0; n < kDp / 16; ++n) {
      uint32_t b[2][2];
      load_b_k_rows<kDp>(b, tile + kk * 16 * kLd<kDp> + n * 16);
      mma_two_tiles(acc[2 * n], acc[2 * n + 1], p[kk], b);
    }
}

// A 16 × 64 product (accumulator layout) rounded to bf16 as the A operand of the next
// product: k-step kk is accumulator tiles 2kk (columns 0-7) and 2kk + 1 (8-15).
__device__ void as_a_operand(uint32_t (&a)[kTileSteps][4], const float (&acc)[kTile / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kTileSteps; ++kk) {
    const float(&lo)[4] = acc[2 * kk];
    const float(&hi)[4] = acc[2 * kk + 1];
    a[kk][0] = pack_bf16x2(lo[0], lo[1]);
    a[kk][1] = pack_bf16x2(lo[2], lo[3]);
    a[kk][2] = pack_bf16x2(hi[0], hi[1]);
    a[kk][3] = pack_bf16x2(hi[2], hi[3]);
  }
}

// max or sum over the four lanes of a group (the lanes that share a row).
__device__ float group_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ float group_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}

// Where the kernels read one tensor's bf16 rows of kDp elements (16-byte aligned rows):
// its packed copy, (B·heads, T, kDp) pair after pair, or the activations themselves when
// they are bf16 with d = kDp, the (B, T, heads, d) view with row stride ld (no pack pass),
// head j at head_offset(j, per_group, group_stride, d) in a row.
// heads: h for q and dout, kv for k and v.
struct RowSource {
  const bf16* data;
  int64_t ld;  // row stride in elements; kDp when packed
  bool packed;
  int64_t heads, per_group, group_stride;  // per_group, group_stride: read in place only
};

// Row 0 of the T rows query pair `pair` (b·h + head) reads in `src`: its own head in q and
// dout, its key/value head head/group in k and v.
__device__ const bf16* pair_rows(const RowSource& src, const Shape& s, int64_t pair) {
  const int64_t b = pair / s.h, query_head = pair - b * s.h;
  const int64_t head = src.heads == s.h ? query_head : query_head / s.group;
  if (src.packed) return src.data + (b * src.heads + head) * s.T * src.ld;
  return src.data + b * s.T * src.ld + head_offset(head, src.per_group, src.group_stride, s.d);
}

// Issues the async copies of rows [0, rows) of dst (row stride kLd) = rows row0, row0 + 1,
// ... of a pair's rows (row stride ld), zero for rows at or past T: 16-byte copies (8 bf16),
// consecutive threads on consecutive chunks. Every thread of the block takes part; the
// caller commits them as a group, waits for it, then a barrier makes the rows every thread's.
template <int kDp>
__device__ void stage_rows(bf16* dst, int rows, const bf16* src, int64_t ld, int64_t row0, int64_t T) {
  constexpr int kChunks = kDp / 8;
  for (int i = threadIdx.x; i < rows * kChunks; i += kBlockThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t at = row0 + r;
    const bool inside = at < T;
    copy_16_async(dst + r * kLd<kDp> + 8 * c, src + (inside ? at : 0) * ld + 8 * c, inside);
  }
}

// Issues tile i of two tensors' rows held double-buffered (K and V, or Q and dO), rows
// row0 .. of each into buffer i % 2, as one group.
template <int kDp>
__device__ void stage_tile(int64_t i, bf16* a_tiles, const bf16* a, int64_t a_ld, bf16* b_tiles, const bf16* b,
                           int64_t b_ld, int64_t row0, int64_t T) {
  stage_rows<kDp>(buffer_for<kDp>(a_tiles, i), kTile, a, a_ld, row0, T);
  stage_rows<kDp>(buffer_for<kDp>(b_tiles, i), kTile, b, b_ld, row0, T);
  commit_copies();
}

// A loop's step i over such tiles: where there is a tile i + 1 (next), issues it (rows
// row0_next ..), then waits for tile i's copies, which leaves tile i + 1's in flight. The
// caller's barrier then makes tile i every thread's.
template <int kDp>
__device__ void stage_next_tile(bool next, int64_t i, bf16* a_tiles, const bf16* a, int64_t a_ld, bf16* b_tiles,
                                const bf16* b, int64_t b_ld, int64_t row0_next, int64_t T) {
  if (!next) {
    wait_for_copies<0>();
    return;
  }
  stage_tile<kDp>(i + 1, a_tiles, a, a_ld, b_tiles, b, b_ld, row0_next, T);
  wait_for_copies<1>();
}

// One query row's lse (in base 2) and D = rowsum(dO ⊙ O) as the backward kernels read them;
// zeros for a row at or past T.
struct RowStats {
  float lse2 = 0.0f, d = 0.0f;
};
__device__ RowStats row_stats(const float* lse, const float* dsum, const Shape& s, int64_t pair, int64_t t) {
  if (t >= s.T) return {};
  return {lse[pair * s.T + t] * kLog2e, dsum[pair * s.T + t]};
}

// dst (B·h, T, dp) = the (B, T, h, d) view at src (row stride ld, head j at
// head_offset(j, per_group, group_stride, d)) rounded to bf16, one pair's rows after another,
// columns d .. dp zero (h: the view's heads, kv for k and v). Act: the activations' storage
// (act_storage.cuh).
template <typename Act>
__global__ void pack_kernel(bf16* dst, const Act* src, int64_t ld, int64_t T, int64_t h, int64_t per_group,
                            int64_t group_stride, int d, int dp, int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t row = i / dp, pair = row / T, t = row - pair * T, b = pair / h, head = pair - b * h;
    const int e = static_cast<int>(i - row * dp);
    store(dst + i, e < d ? load(src + (b * T + t) * ld + head_offset(head, per_group, group_stride, d) + e) : 0.0f);
  }
}

// Rows row0 + g and row0 + g + 8 (those below T) of a (T, d) view at dst (row stride ld) =
// acc (16 × kDp) times scale[0] and scale[1], columns below d.
template <int kDp, typename Act>
__device__ void write_rows(const float (&acc)[kDp / 8][4], const float (&scale)[2], Act* dst, int64_t ld, int64_t row0,
                           int64_t T, int d) {
  const Lane lane;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t at = row0 + lane.row(e);
    if (at >= T) continue;
#pragma unroll
    for (int n = 0; n < kDp / 8; ++n) {
      const int column = 8 * n + lane.column(e);
      if (column < d) store(dst + at * ld + column, acc[n][e] * scale[e / 2]);
    }
  }
}

// Forward, one block per (pair, 128 query rows), over the key tiles of 64 the rows see. A
// lane holds its two rows' scores, probabilities and outputs in registers (FlashAttention-2's
// online softmax), with the row max and sum shared across its group of four lanes. Scores
// and the row max are in base 2 (kLog2e).
template <int kDp, typename Act>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(Act* out, float* lse, RowSource q, RowSource k, RowSource v, Shape s) {
  using L = ForwardLayout<kDp>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *qs = tile_at(smem, L::q), *ks = tile_at(smem, L::k), *vs = tile_at(smem, L::v);
  const int warp = threadIdx.x / kWarpSize;
  const Lane lane;
  const BlockTile bt = block_tile(s, s.pairs, true);
  const int64_t q0 = bt.tile * kBlockRows, warp_row0 = q0 + warp * kWarpRows;
  const int64_t rows[2] = {warp_row0 + lane.g, warp_row0 + lane.g + 8};
  const bf16 *pair_k = pair_rows(k, s, bt.pair), *pair_v = pair_rows(v, s, bt.pair);
  stage_rows<kDp>(qs, kBlockRows, pair_rows(q, s, bt.pair), q.ld, q0, s.T);
  commit_copies();
  stage_tile<kDp>(0, ks, pair_k, k.ld, vs, pair_v, v.ld, 0, s.T);
  wait_for_copies<1>();  // the queries
  __syncthreads();
  uint32_t qa[kDp / 16][4];
  load_a_rows<kDp>(qa, qs + warp * kWarpRows * kLd<kDp>);
  float o[kDp / 8][4];
  zero(o);
  float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.0f, 0.0f};  // row_sum: this lane's columns
  const float scale2 = s.scale * kLog2e;
  const int64_t keys = q0 + kBlockRows < s.T ? q0 + kBlockRows : s.T;  // the block's rows see keys < keys
  for (int64_t i = 0, j0 = 0; j0 < keys; ++i, j0 += kTile) {
    __syncthreads();  // every warp is done with tile i - 1, whose buffer tile i + 1 takes
    const bool next = j0 + kTile < keys;
    stage_next_tile<kDp>(next, i, ks, pair_k, k.ld, vs, pair_v, v.ld, j0 + kTile, s.T);
    __syncthreads();
    // Skip a tile none of the warp's rows sees, and rows past T. Otherwise j0 <= the warp's
    // first row, so key j0 is seen by every row and the new max is finite.
    if (j0 > warp_row0 || warp_row0 >= s.T) continue;
    const bf16 *kt = buffer_for<kDp>(ks, i), *vt = buffer_for<kDp>(vs, i);
    float p[kTile / 8][4];
    multiply_transposed<kDp>(p, qa, kt);  // S
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = j0 + 8 * n + lane.column(e);
        p[n][e] = key <= rows[e / 2] ? p[n][e] * scale2 : neg_inf();
        tile_max[e / 2] = fmaxf(tile_max[e / 2], p[n][e]);
      }
    float alpha[2];
    for (int r = 0; r < 2; ++r) {
      const float new_max = fmaxf(row_max[r], group_max(tile_max[r]));
      alpha[r] = exp2f(row_max[r] - new_max);  // 0 on the first tile
      row_max[r] = new_max;
      row_sum[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[n][e] = exp2f(p[n][e] - row_max[e / 2]);
        row_sum[e / 2] += p[n][e];
      }
#pragma unroll
    for (int n = 0; n < kDp / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];
    uint32_t pa[kTileSteps][4];
    as_a_operand(pa, p);
    multiply_accumulate<kDp>(o, pa, vt);  // O += P · V
  }
  float inv[2];
  for (int r = 0; r < 2; ++r) {
    row_sum[r] = group_sum(row_sum[r]);
    inv[r] = 1.0f / row_sum[r];
  }
  const PairBase base = pair_base(s, bt.pair);
  write_rows<kDp>(o, inv, out + base.out, s.h * s.d, warp_row0, s.T, s.d);
  if (lane.t == 0)
    for (int r = 0; r < 2; ++r)
      if (rows[r] < s.T) lse[bt.pair * s.T + rows[r]] = row_max[r] * kLn2 + logf(row_sum[r]);
}

// dK, dV, one block per (kv pair, 128 keys), over the query heads of its group in order and
// for each the query tiles of 64 that see them (one sequence of steps, so the next tile's
// copies are in flight across a change of head too):
// dV = Σ P^T · dO, dK = Σ dS^T · Q / sqrt(d), dS = P ⊙ (dP − D), P = exp(Q·K^T/sqrt(d) − lse).
// A warp computes its 16 keys' transposed scores S^T (16 keys, 64 queries) directly, from
// its keys' K and V held as A operands in registers.
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
  const int warp = threadIdx.x / kWarpSize;
  const Lane lane;
  const BlockTile bt = block_tile(s, s.kv_pairs, false);  // rank 0 = the first keys, seen by the most queries
  const int64_t k0 = bt.tile * kBlockRows, warp_key0 = k0 + warp * kWarpRows;
  const int64_t keys[2] = {warp_key0 + lane.g, warp_key0 + lane.g + 8};
  // Step i: query pair pair0 + i / head_tiles, its query tile i % head_tiles from k0.
  const int64_t pair0 = first_query_pair(s, bt.pair), head_tiles = (s.T - k0 + kTile - 1) / kTile;
  const int64_t steps = s.group * head_tiles;
  stage_rows<kDp>(ks, kBlockRows, pair_rows(k, s, pair0), k.ld, k0, s.T);
  stage_rows<kDp>(vs, kBlockRows, pair_rows(v, s, pair0), v.ld, k0, s.T);
  commit_copies();
  stage_tile<kDp>(0, qs, pair_rows(q, s, pair0), q.ld, dos, pair_rows(dout, s, pair0), dout.ld, k0, s.T);
  // Thread t < 64 holds query row t's lse and D of the tile after the one in shared memory,
  // loaded an iteration ahead so that its latency hides behind the tile before.
  RowStats next_stats = threadIdx.x < kTile ? row_stats(lse, dsum, s, pair0, k0 + threadIdx.x) : RowStats{};
  wait_for_copies<1>();  // the keys and values
  __syncthreads();
  uint32_t ka[kDp / 16][4], va[kDp / 16][4];
  load_a_rows<kDp>(ka, ks + warp * kWarpRows * kLd<kDp>);
  load_a_rows<kDp>(va, vs + warp * kWarpRows * kLd<kDp>);
  float dk_acc[kDp / 8][4], dv_acc[kDp / 8][4];
  zero(dk_acc);
  zero(dv_acc);
  const float scale2 = s.scale * kLog2e;
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t q0 = k0 + (i % head_tiles) * kTile;
    // Step i + 1's pair and first query row (past T after the last step: no rows, zero stats).
    const bool next = i + 1 < steps;
    const int64_t next_pair = next ? pair0 + (i + 1) / head_tiles : pair0;
    const int64_t next_q0 = next ? k0 + ((i + 1) % head_tiles) * kTile : s.T;
    __syncthreads();  // every warp is done with tile i - 1: its lse and D, the buffer tile i + 1 takes
    if (threadIdx.x < kTile) {
      lse_s[threadIdx.x] = next_stats.lse2;
      d_s[threadIdx.x] = next_stats.d;
      next_stats = row_stats(lse, dsum, s, next_pair, next_q0 + threadIdx.x);
    }
    stage_next_tile<kDp>(next, i, qs, pair_rows(q, s, next_pair), q.ld, dos, pair_rows(dout, s, next_pair), dout.ld,
                         next_q0, s.T);
    __syncthreads();
    if (q0 + kTile <= warp_key0 || warp_key0 >= s.T) continue;  // no query of the tile sees the warp's keys
    const bf16 *qt = buffer_for<kDp>(qs, i), *dot = buffer_for<kDp>(dos, i);
    float p[kTile / 8][4];
    multiply_transposed<kDp>(p, ka, qt);  // S^T
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int column = 8 * n + lane.column(e);
        const int64_t t = q0 + column;
        p[n][e] = keys[e / 2] <= t && t < s.T ? exp2f(p[n][e] * scale2 - lse_s[column]) : 0.0f;
      }
    uint32_t pa[kTileSteps][4];
    as_a_operand(pa, p);
    multiply_accumulate<kDp>(dv_acc, pa, dot);  // dV += P^T · dO
    float ds[kTile / 8][4];
    multiply_transposed<kDp>(ds, va, dot);  // dP^T = V · dO^T
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - d_s[8 * n + lane.column(e)]);
    as_a_operand(pa, ds);
    multiply_accumulate<kDp>(dk_acc, pa, qt);  // dK += dS^T · Q
  }
  const PairBase base = pair_base(s, pair0);
  write_rows<kDp>(dk_acc, {s.scale, s.scale}, dk + base.kv, s.ld, warp_key0, s.T, s.d);
  write_rows<kDp>(dv_acc, {1.0f, 1.0f}, dv + base.kv, s.ld, warp_key0, s.T, s.d);
}

// dQ, one block per (pair, 128 query rows), over the key tiles of 64 the rows see:
// dQ = Σ dS · K / sqrt(d), with the rows' Q and dO held as A operands in registers.
template <int kDp, typename Act>
__global__ void __launch_bounds__(kBlockThreads) dq_kernel(Act* dq, RowSource dout, const float* lse, const float* dsum,
                                                           RowSource q, RowSource k, RowSource v, Shape s) {
  using L = QueryGradLayout<kDp>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *qs = tile_at(smem, L::q), *dos = tile_at(smem, L::dout);
  bf16 *ks = tile_at(smem, L::k), *vs = tile_at(smem, L::v);
  const int warp = threadIdx.x / kWarpSize;
  const Lane lane;
  const BlockTile bt = block_tile(s, s.pairs, true);
  const int64_t pair = bt.pair, q0 = bt.tile * kBlockRows, warp_row0 = q0 + warp * kWarpRows;
  const int64_t rows[2] = {warp_row0 + lane.g, warp_row0 + lane.g + 8};
  const bf16 *pair_k = pair_rows(k, s, pair), *pair_v = pair_rows(v, s, pair);
  stage_rows<kDp>(qs, kBlockRows, pair_rows(q, s, pair), q.ld, q0, s.T);
  stage_rows<kDp>(dos, kBlockRows, pair_rows(dout, s, pair), dout.ld, q0, s.T);
  commit_copies();
  stage_tile<kDp>(0, ks, pair_k, k.ld, vs, pair_v, v.ld, 0, s.T);
  const RowStats stats[2] = {row_stats(lse, dsum, s, pair, rows[0]), row_stats(lse, dsum, s, pair, rows[1])};
  wait_for_copies<1>();  // the queries and their dO
  __syncthreads();
  uint32_t qa[kDp / 16][4], doa[kDp / 16][4];
  load_a_rows<kDp>(qa, qs + warp * kWarpRows * kLd<kDp>);
  load_a_rows<kDp>(doa, dos + warp * kWarpRows * kLd<kDp>);
  float dq_acc[kDp / 8][4];
  zero(dq_acc);
  const float scale2 = s.scale * kLog2e;
  const int64_t keys = q0 + kBlockRows < s.T ? q0 + kBlockRows : s.T;
  for (int64_t i = 0, j0 = 0; j0 < keys; ++i, j0 += kTile) {
    __syncthreads();  // every warp is done with tile i - 1, whose buffer tile i + 1 takes
    const bool next = j0 + kTile < keys;
    stage_next_tile<kDp>(next, i, ks, pair_k, k.ld, vs, pair_v, v.ld, j0 + kTile, s.T);
    __syncthreads();
    if (j0 > warp_row0 || warp_row0 >= s.T) continue;
    const bf16 *kt = buffer_for<kDp>(ks, i), *vt = buffer_for<kDp>(vs, i);
    float p[kTile / 8][4];
    multiply_transposed<kDp>(p, qa, kt);  // S
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = j0 + 8 * n + lane.column(e);
        p[n][e] = key <= rows[e / 2] ? exp2f(p[n][e] * scale2 - stats[e / 2].lse2) : 0.0f;
      }
    float ds[kTile / 8][4];
    multiply_transposed<kDp>(ds, doa, vt);  // dP = dO · V^T
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - stats[e / 2].d);
    uint32_t dsa[kTileSteps][4];
    as_a_operand(dsa, ds);
    multiply_accumulate<kDp>(dq_acc, dsa, kt);  // dQ += dS · K
  }
  const PairBase base = pair_base(s, pair);
  write_rows<kDp>(dq_acc, {s.scale, s.scale}, dq + base.q, s.ld, warp_row0, s.T, s.d);
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

// One input of the kernels as the backend got it: a (B, T, heads, d) view with row stride
// ld, head j at head_offset(j, per_group, group_stride, d) in a row (q: per_group h/kv; k,
// v: 1; dout: 1 with group_stride d).
struct View {
  ConstActPtr data;
  int64_t ld, heads, per_group, group_stride;
};

// The activations can be read in place when every head's rows are bf16 rows of kDp elements
// on 16-byte boundaries (GPT-2's d = 64 in bf16 storage): the base, the row stride and the
// group stride all multiples of 8 elements (d = kDp is one too); else they are packed first.
bool reads_in_place(const View& v, int64_t d, int dp) {
  return v.data.type() == ElementType::bfloat16 && d == dp && v.ld % 8 == 0 && v.group_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(v.data.raw()) % 16 == 0;
}

// Packs the view v into dst (B·heads, T, dp) bf16 (pack_kernel).
void pack(const Context& ctx, const char* op, bf16* dst, const View& v, const Shape& s, int dp) {
  const int64_t total = s.pairs / s.h * v.heads * s.T * dp;
  with_storage(v.data.type(), [&](auto storage) {
    using Act = decltype(storage);
    pack_kernel<Act><<<grid_for(total), kThreads, 0, ctx.stream>>>(dst, typed<Act>(v.data), v.ld, s.T, v.heads,
                                                                   v.per_group, v.group_stride, s.d, dp, total);
  });
  check_launch(ctx, op);
}

// The kernels' sources for q, k, v (and dout), in order: each read in place or packed, the
// packs in one scratch request (B·heads·T·dp·2 bytes each) with D (B·h·T floats) when
// with_dsum.
struct Sources {
  RowSource rows[4] = {};
  float* dsum = nullptr;
};
Sources take_sources(const Context& ctx, const char* op, const Shape& s, int dp, std::initializer_list<View> views,
                     bool with_dsum) {
  Sources out;
  ScratchLayout layout;
  size_t at[4] = {};
  int i = 0;
  for (const View& v : views) {
    out.rows[i].packed = !reads_in_place(v, s.d, dp);
    const size_t pack_bytes = static_cast<size_t>(s.pairs / s.h * v.heads * s.T * dp) * sizeof(bf16);
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
      pack(ctx, op, packed, v, s, dp);
      rows = {packed, dp, true, v.heads, 1, dp};
    } else {
      rows = {static_cast<const bf16*>(v.data.raw()), v.ld, false, v.heads, v.per_group, v.group_stride};
    }
    ++i;
  }
  if (with_dsum) out.dsum = reinterpret_cast<float*>(base + dsum_at);
  return out;
}

}  // namespace

void attention_forward_bf16(const Context& ctx, ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v,
                            int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  const char* op = "attention_forward";
  const Shape s = shape_of(ld, B, T, h, kv, d, group_stride, kBlockRows);
  const int64_t g = h / kv;
  with_padded_head(d, [&](auto dp) {
    constexpr int kDp = decltype(dp)::value;
    const Sources in =
        take_sources(ctx, op, s, kDp,
                     {{q, ld, h, g, group_stride}, {k, ld, kv, 1, group_stride}, {v, ld, kv, 1, group_stride}}, false);
    with_storage(out.type(), [&](auto storage) {
      using Act = decltype(storage);
      launch(ctx, op, forward_kernel<kDp, Act>, tile_blocks(op, s, s.pairs), kBlockThreads, ForwardLayout<kDp>::bytes,
             typed<Act>(out), lse, in.rows[0], in.rows[1], in.rows[2], s);
    });
  });
}

void attention_backward_bf16(const Context& ctx, ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out,
                             const float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B,
                             int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  const char* op = "attention_backward";
  const Shape s = shape_of(ld, B, T, h, kv, d, group_stride, kBlockRows);
  const int64_t g = h / kv;
  with_padded_head(d, [&](auto dp) {
    constexpr int kDp = decltype(dp)::value;
    const Sources in = take_sources(ctx, op, s, kDp,
                                    {{q, ld, h, g, group_stride},
                                     {k, ld, kv, 1, group_stride},
                                     {v, ld, kv, 1, group_stride},
                                     {dout, h * d, h, 1, d}},
                                    true);
    attention_row_dots(ctx, op, in.dsum, dout, out, s);
    const RowSource pq = in.rows[0], pk = in.rows[1], pv = in.rows[2], pdout = in.rows[3];
    const float* dsum = in.dsum;
    with_storage(dq.type(), [&](auto storage) {
      using Act = decltype(storage);
      launch(ctx, op, dkdv_kernel<kDp, Act>, tile_blocks(op, s, s.kv_pairs), kBlockThreads, KeyValueLayout<kDp>::bytes,
             typed<Act>(dk), typed<Act>(dv), pdout, lse, dsum, pq, pk, pv, s);
      launch(ctx, op, dq_kernel<kDp, Act>, tile_blocks(op, s, s.pairs), kBlockThreads, QueryGradLayout<kDp>::bytes,
             typed<Act>(dq), pdout, lse, dsum, pq, pk, pv, s);
    });
  });
}

}  // namespace axonn::cuda
