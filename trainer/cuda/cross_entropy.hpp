#pragma once
// Vocab-parallel softmax cross-entropy: logits (m, v_local) for the vocab columns
// [v0, v0 + v_local); stages and collectives as documented at Backend::cross_entropy_row_max.
// One block per row for the row reductions (max, Σ exp in double), fixed-order trees.
#include <cstdint>

#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// (1) row_max (m) = max over the local columns
void cross_entropy_row_max(const Context& ctx, float* row_max, const float* logits, int64_t m, int64_t v_local);
// (2) max (m) = max over gathered_max (groups, m); exps (m, v_local) = exp(logits − max) (may
//     alias logits); partials (m, 2) = (Σ_j exps, the target's logit if in range else 0)
void cross_entropy_partials(const Context& ctx, float* partials, float* max, float* exps, const float* gathered_max,
                            int64_t groups, const float* logits, const int32_t* targets, int64_t m, int64_t v_local,
                            int64_t v0);
// (3) loss (m) = log(partials[i,0]) + max[i] − partials[i,1]
void cross_entropy_loss(const Context& ctx, float* loss, const float* partials, const float* max, int64_t m);
// dlogits (m, v_local) = (exps/partials[i,0] − onehot(target))·scale; dlogits may alias exps
// Whole rows (one rank holds the vocabulary), forward and backward in one kernel
// (Backend::cross_entropy_rows; it needs no scratch).
void cross_entropy_rows(const Context& ctx, float* loss, float* logits, const int32_t* targets, int64_t m, int64_t V,
                        float scale);
void cross_entropy_backward(const Context& ctx, float* dlogits, const float* exps, const float* partials,
                            const int32_t* targets, int64_t m, int64_t v_local, int64_t v0, float scale);

}  // namespace axonn::cuda
