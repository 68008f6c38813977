#pragma once
// Causal self-attention on this rank's h heads of size d, scale 1/sqrt(d), with the
// interface's materialized probabilities probs (B, h, T, T) (0 above the diagonal); q, k, v
// are (B, T, h, d) views with row stride ld (see Backend::attention_forward).
//
// Per sequence b, the heads of q, k, v (and dout) are gathered from their strided views into
// contiguous (h, T, d) scratch, the matmuls are cuBLASLt GEMMs batched over the h heads (the
// backend's GemmMath) on those plain, non-overlapping, 256-byte aligned matrices, and the
// results are scattered back into their strided place. The copies move O(T·h·d) floats per
// sequence against the O(h·T²) of the scores. Softmax and its backward run one block per
// row. The full T×T products are computed (twice the causal work; the zeros above the
// diagonal make them exact).
//
// A flash-style kernel (no T×T matrix in memory, the probabilities recomputed in backward)
// needs the interface to keep each row's log-sum-exp instead of probs: a later change.
#include <cstdint>

#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// out (B, T, h·d); probs (B, h, T, T)
void attention_forward(const Context& ctx, float* out, float* probs, const float* q, const float* k, const float* v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d);
// dq, dk, dv: views like q, k, v (same ld), overwritten; dout (B, T, h·d)
void attention_backward(const Context& ctx, float* dq, float* dk, float* dv, const float* dout, const float* probs,
                        const float* q, const float* k, const float* v, int64_t ld, int64_t B, int64_t T, int64_t h,
                        int64_t d);

}  // namespace axonn::cuda
