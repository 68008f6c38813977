#pragma once
// Causal self-attention on this rank's h query heads and kv key/value heads, h a multiple of
// kv (grouped-query attention; see Backend::attention_forward for the q, k, v views),
// FlashAttention-2 style: no T×T matrix is kept. Per (sequence, query head) the
// query rows go in blocks of kAttentionRowBlock; each block walks the keys it can see in
// tiles of kAttentionKeyBlock, as sgemm on (rows, keys) tiles, so the masked upper triangle
// is (almost) never computed:
// - forward keeps a running row maximum and sum (online softmax), rescales the output rows
//   when the maximum grows, and keeps lse = max + log(sum) per row;
// - backward recomputes each tile's P = exp(S − lse) and accumulates dQ of the block and
//   dK, dV of the tile in place, with D = rowsum(dO ⊙ O).
// Working memory is two (row block, key tile) tiles per thread, whatever T is.
// Query head i reads key/value head i/(h/kv). The backward runs a key/value head's h/kv query
// heads one after another on one thread, adding into its dK, dV in head order, so a group's
// sum has one order and no two threads write the same rows; with kv = h it is the
// multi-head attention's computation, the same bits.
// The (sequence, head) pairs are split over the pool's threads, each running its GEMMs on
// OpenBLAS single-threaded (as the CPU backend keeps it), and every sum over tiles runs in
// tile order: a pair's result does not depend on which thread computed it, nor on the thread
// count.
#include <cstdint>
#include <vector>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

constexpr int64_t kAttentionRowBlock = 64;
// A multiple of kAttentionRowBlock, so a row block's last key tile always starts at or before
// its first row. 256 keeps the GEMMs of a GPT-2 sized head (T <= 256) in one tile.
constexpr int64_t kAttentionKeyBlock = 256;

// q (B, T, h, d), k, v (B, T, kv, d), row stride ld, key/value groups group_stride apart
// within a row (Backend::attention_forward); out (B, T, h·d); lse (B, h, T).
// scratch: resized to two tiles per thread.
void attention_forward(ThreadPool& pool, float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride,
                       std::vector<float>& scratch);
// dq, dk, dv: views like q, k, v (ld, group_stride), overwritten (dk, dv: each the sum over its
// group's query heads); dout, out (B, T, h·d); lse (B, h, T) from attention_forward.
void attention_backward(ThreadPool& pool, float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, int64_t ld, int64_t B,
                        int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride, std::vector<float>& scratch);

}  // namespace axonn::cpu
