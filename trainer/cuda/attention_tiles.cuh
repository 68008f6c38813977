#pragma once
// What both attention kernel sets (attention.cu: float32 on CUDA cores; attention_bf16.cu:
// bf16 on tensor cores) share: the problem's shape, which (pair, tile) a block owns, where a
// pair's rows start, and the launch that opts in to more than 48 KiB of shared memory.
// Included by .cu files: C++17.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda::attention_tiles {

constexpr size_t kDefaultSharedBytes = 48 * 1024;  // above this a kernel must opt in

// The shapes every kernel needs, by value. A pair is one (sequence, query head); a kv pair
// one (sequence, key/value head), which the group = h/kv query pairs b·h + kv_head·group + g
// (g < group) read (grouped-query attention; group 1 is multi-head attention).
struct Shape {
  int64_t ld, T, h, pairs, tiles;  // pairs = B·h; tiles = ceil(T / rows per block) per pair
  int64_t kv, group, kv_pairs;     // kv_pairs = B·kv
  int64_t group_stride;            // elements from one key/value group to the next in a row
  int d;
  float scale;  // 1/sqrt(d)
};

inline Shape shape_of(int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride,
                      int64_t rows_per_block) {
  return Shape{ld,
               T,
               h,
               B * h,
               (T + rows_per_block - 1) / rows_per_block,
               kv,
               h / kv,
               B * kv,
               group_stride,
               static_cast<int>(d),
               1.0f / std::sqrt(static_cast<float>(d))};
}

// Block x = rank·pairs + pair over `pairs` pairs (s.pairs, or s.kv_pairs for the kernels that
// own a key/value head's rows): rank r of every pair is scheduled before rank r + 1. With
// `longest_first` rank 0 is the last tile (the query tiles that see the most keys).
struct BlockTile {
  int64_t pair, tile;
};
__device__ inline BlockTile block_tile(const Shape& s, int64_t pairs, bool longest_first) {
  const int64_t x = blockIdx.x, rank = x / pairs;
  return {x - rank * pairs, longest_first ? s.tiles - 1 - rank : rank};
}

// Elements from the start of a row to head `head` of a view whose heads come per_group to a
// group, the groups group_stride apart (Backend::attention_forward): q's query heads
// per_group = h/kv; k's and v's heads per_group 1; out's and dout's heads per_group 1 with
// group_stride d (plain (B, T, h·d) rows).
__host__ __device__ inline int64_t head_offset(int64_t head, int64_t per_group, int64_t group_stride, int64_t d) {
  return head / per_group * group_stride + head % per_group * d;
}

// Where query pair b·h + head starts: in q (row stride ld), in k and v at its key/value head
// head/group (row stride ld), and in out, dout (row stride h·d).
struct PairBase {
  int64_t q, kv, out;
};
__device__ inline PairBase pair_base(const Shape& s, int64_t pair) {
  const int64_t b = pair / s.h, head = pair - b * s.h;
  return {b * s.T * s.ld + head_offset(head, s.group, s.group_stride, s.d),
          b * s.T * s.ld + head / s.group * s.group_stride, b * s.T * s.h * s.d + head * s.d};
}

// The first query pair of kv pair b·kv + kv_head: b·h + kv_head·group.
__device__ inline int64_t first_query_pair(const Shape& s, int64_t kv_pair) {
  const int64_t b = kv_pair / s.kv, kv_head = kv_pair - b * s.kv;
  return b * s.h + kv_head * s.group;
}

// One block per (pair, tile) of `pairs` pairs.
inline unsigned tile_blocks(const char* op, const Shape& s, int64_t pairs) {
  return grid_dim(op, "attention tiles", pairs * s.tiles, true);
}

// dsum (B, h, T) = D = rowsum(dout ⊙ out) of every query row, in float32 (attention.cu).
void attention_row_dots(const Context& ctx, const char* op, float* dsum, ConstActPtr dout, ConstActPtr out,
                        const Shape& s);

template <typename Kernel, typename... Args>
void launch(const Context& ctx, const char* op, Kernel kernel, unsigned blocks, int threads, size_t shared_bytes,
            Args... args) {
  if (shared_bytes > kDefaultSharedBytes)  // an H100 allows 227 KiB per block
    AXONN_CUDA_OP_CHECK(
        op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)));
  kernel<<<blocks, threads, shared_bytes, ctx.stream>>>(args...);
  check_launch(ctx, op);
}

}  // namespace axonn::cuda::attention_tiles
