#pragma once
// Causal flash attention on tensor cores, for the bf16 GEMM math (attention.hpp picks it):
// q, k, v, dout are rounded to bf16 as they are staged in shared memory, the probabilities P
// and their gradients dS are rounded to bf16 before they multiply V, dO, Q or K, and every
// product accumulates in float32 (WMMA 16×16×16). Softmax statistics (row max, sum, lse) and
// D = rowsum(dout ⊙ out) stay float32. Same arguments as attention.hpp; d <= 128.
//
// Tiles: a block is 8 warps and owns 128 rows (queries in the forward and dQ kernels, keys in
// the dK/dV kernel); a warp owns 16 of them. The other side walks in tiles of 64 through
// shared memory. Each warp's 16×64 score tile goes through shared memory once per tile, where
// two lanes per row apply the mask and the online softmax in float32, so the kernels use only
// the documented WMMA fragment operations (load, store, mma, fill): no fragment layout is
// assumed. The head size is padded with zeros to a multiple of 32 (kernels for 32, 64, 96,
// 128). Deterministic, like the float32 kernels: dK, dV per key block, dQ per query block,
// no atomics.
#include <cstdint>

#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

void attention_forward_bf16(const Context& ctx, float* out, float* lse, const float* q, const float* k,
                            const float* v, int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d);
// dsum (B, h, T): D = rowsum(dout ⊙ out), computed by the caller in float32.
void attention_backward_bf16(const Context& ctx, float* dq, float* dk, float* dv, const float* dout,
                             const float* lse, const float* dsum, const float* q, const float* k, const float* v,
                             int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d);

}  // namespace axonn::cuda
