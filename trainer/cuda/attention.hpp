#pragma once
// Causal self-attention on this rank's h query heads and kv key/value heads (h a multiple of
// kv: grouped-query attention, query head i reading key/value head i/(h/kv)) of size
// d <= 128, scale 1/sqrt(d), fused flash-style (FlashAttention-2): no T×T matrix in memory.
// q is a (B, T, h, d) view, k and v (B, T, kv, d) views, with row stride ld and the
// key/value groups group_stride apart within a row (see Backend::attention_forward), read in
// place.
//
// Forward: one block per (sequence, head, tile of 32 query rows) keeps the tile's queries in
// shared memory and walks the key/value tiles of 32 up to the causal limit, each key tile in
// shared memory, with an online softmax (running row max and sum, the output rescaled when
// the max grows) in float32; it writes out and lse = max + log(sum) per row.
// Backward recomputes P = exp(s − lse) tile by tile, with D = rowsum(dout ⊙ out) from a
// small kernel, in two kernels that each own what they write, so no float atomics and the
// same bits on every run: dK, dV per key tile (looping over the query tiles that see it),
// dQ per query tile (looping over the key tiles it sees). A key/value head's dK, dV block
// loops over its group's query heads in order, so their sum has one order.
// Inside a tile a warp owns 4 rows; its lanes own one key each for the scores and columns
// e, e + 32, ... of a row for the products with V, K, Q and dO. Plain float32 FMAs, exact
// like GemmMath::fp32; with GemmMath::bf16 both calls run the tensor-core kernels of
// attention_bf16.hpp instead (same arguments, bf16 rounding).
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// The largest head size d the kernels take: each lane holds d/32 columns of 4 rows.
constexpr int64_t kAttentionMaxHeadSize = 128;

// out (B, T, h·d); lse (B, h, T). The activations (out, q, k, v; in the backward also dq, dk,
// dv, dout) are all float32 or all bf16; the math and lse are float32 either way.
void attention_forward(const Context& ctx, ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride);
// dq, dk, dv: views like q, k, v (same ld, group_stride), overwritten (dk, dv the sums over each group's
// query heads); dout, out (B, T, h·d); lse (B, h, T)
void attention_backward(const Context& ctx, ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out,
                        const float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B, int64_t T,
                        int64_t h, int64_t kv, int64_t d, int64_t group_stride);

}  // namespace axonn::cuda
