#pragma once
// Vocab-parallel softmax cross-entropy: logits (m, v_local) for the vocab columns
// [v0, v0 + v_local); stages and collectives as documented at Backend::cross_entropy_row_max.
// One block per row for the row reductions (max, Σ exp in double), fixed-order trees.
// Logits, exps and dlogits are activations of either storage type (act_storage.cuh), one
// type per call; maxima, partials and losses float32.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// (1) row_max (m) = max over the local columns
void cross_entropy_row_max(const Context& ctx, float* row_max, ConstActPtr logits, int64_t m, int64_t v_local);
// (2) max (m) = max over gathered_max (groups, m); exps (m, v_local) = exp(logits − max) (may
//     alias logits); partials (m, 2) = (Σ_j exps, the target's logit if in range else 0)
void cross_entropy_partials(const Context& ctx, float* partials, float* max, ActPtr exps, const float* gathered_max,
                            int64_t groups, ConstActPtr logits, const int32_t* targets, int64_t m, int64_t v_local,
                            int64_t v0);
// (3) loss (m) = log(partials[i,0]) + max[i] − partials[i,1]
void cross_entropy_loss(const Context& ctx, float* loss, const float* partials, const float* max, int64_t m);
// dlogits (m, v_local) = (exps/partials[i,0] − onehot(target))·scale; dlogits may alias exps
// Whole rows (one rank holds the vocabulary), forward and backward in one kernel
// (Backend::cross_entropy_rows; it needs no scratch).
void cross_entropy_rows(const Context& ctx, float* loss, ActPtr logits, const int32_t* targets, int64_t m, int64_t V,
                        float scale);
void cross_entropy_backward(const Context& ctx, ActPtr dlogits, ConstActPtr exps, const float* partials,
                            const int32_t* targets, int64_t m, int64_t v_local, int64_t v0, float scale);

}  // namespace axonn::cuda
