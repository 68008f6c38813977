#pragma once
// Softmax cross-entropy over vocab-parallel logits (m, v_local), columns [v0, v0 + v_local) of
// the vocabulary. The stages and the collectives between them are documented at
// Backend::cross_entropy_row_max; with one rank (groups = 1, v0 = 0) they are a plain
// softmax cross-entropy. exp(logits − max) is computed once, in stage (2), and reused by
// backward.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// (1) row_max (m) = max_j logits[i, j]
void cross_entropy_row_max(ThreadPool& pool, float* row_max, const float* logits, int64_t m, int64_t v_local);
// (2) max (m) = max over gathered_max (groups, m); exps (m, v_local) = exp(logits − max) (may
// alias logits); partials (m, 2) = (Σ_j exps, logits[i, target − v0] or 0 when out of range)
void cross_entropy_partials(ThreadPool& pool, float* partials, float* max, float* exps, const float* gathered_max,
                            int64_t groups, const float* logits, const int32_t* targets, int64_t m, int64_t v_local,
                            int64_t v0);
// (3) loss (m) = log(partials[i,0]) + max[i] − partials[i,1]
void cross_entropy_loss(ThreadPool& pool, float* loss, const float* partials, const float* max, int64_t m);
// dlogits (m, v_local) = (exps / partials[i,0] − onehot)·scale (may alias exps)
void cross_entropy_backward(ThreadPool& pool, float* dlogits, const float* exps, const float* partials,
                            const int32_t* targets, int64_t m, int64_t v_local, int64_t v0, float scale);

}  // namespace axonn::cpu
