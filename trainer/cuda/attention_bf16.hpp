#pragma once
// Causal flash attention on tensor cores, for the bf16 GEMM math (attention.hpp picks it):
// the kernels read q, k, v (and dout) as bf16 rows of dp elements, dp the head size padded
// to a multiple of 32 (kernels for 32, 64, 96, 128), in contiguous 16-byte copies (each K/V
// tile is read from L2 once per 128 query rows). bf16 activations with d = dp (GPT-2's 64)
// are read in place; others are first packed, rounded to bf16 (when float32), into scratch
// as (B·heads, T, dp) (heads: h for q and dout, kv for k and v) with zeros in the padding.
// The probabilities P and their gradients dS are rounded to bf16 before they multiply V, dO,
// Q or K, and every product accumulates in float32 (mma.sync m16n8k16, warp_mma.cuh).
// Softmax statistics (row max, sum, lse) and D = rowsum(dout ⊙ out) stay float32. Same
// arguments as attention.hpp (grouped-query attention too); d <= 128. Each pack takes
// B·heads·T·dp·2 bytes of the backend's scratch.
//
// Tiles (FlashAttention-2's): a block is 8 warps and owns 128 rows (queries in the forward and
// dQ kernels, keys in the dK/dV kernel); a warp owns 16 of them and holds their operands (Q, or
// K and V, and dO) in registers. The other side walks in tiles of 64 rows through shared
// memory, read with ldmatrix. A warp's 16 × 64 scores, probabilities and dS never leave
// registers: the accumulators of one product become the A operand of the next, which the
// documented mma layouts allow (WMMA's opaque fragments would need a trip through shared
// memory). Deterministic, like the float32 kernels: dK, dV per key block, dQ per query block,
// no atomics.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// The activations share one type (float32 or bf16), which attention.cu has checked.
void attention_forward_bf16(const Context& ctx, ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v,
                            int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride);
void attention_backward_bf16(const Context& ctx, ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out,
                             const float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B,
                             int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride);

}  // namespace axonn::cuda
