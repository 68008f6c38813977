#pragma once
// Mixture of experts on the CPU (Backend's "mixture of experts" ops): the router's GEMMs on
// sgemm, its softmax, top-k and their backward one token row at a time, and the row
// permutations around the experts (dispatch gathers token rows into per-expert blocks,
// combine gathers each token's expert rows back, weighted by its gates). Every output row
// is written by one thread in a fixed order, so results do not depend on the thread count.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// logits (m, E) = x (m, c)·w (c, E)
void router_logits(float* logits, const float* x, const float* w, int64_t m, int64_t c, int64_t E);
// dw (c, E) += x^T·dlogits;  dx (m, c) += dlogits (m, E)·w^T
void router_backward(float* dx, float* dw, const float* dlogits, const float* x, const float* w, int64_t m, int64_t c,
                     int64_t E);
// probs (m, E) = softmax rows of logits (may alias); experts, gates (m, k): the top k
void router_top_k(ThreadPool& pool, float* probs, int32_t* experts, float* gates, const float* logits, int64_t m,
                  int64_t E, int64_t k);
// dlogits (m, E) from dgates (m, k) and the per-expert coef (E, or null)
void router_logits_grad(ThreadPool& pool, float* dlogits, const float* probs, const int32_t* experts,
                        const float* dgates, const float* coef, int64_t m, int64_t E, int64_t k);
// out (n, c) row j = in (m, c) row rows[j] (·scale[j])
void gather_rows(ThreadPool& pool, float* out, const float* in, const int32_t* rows, const float* scale, int64_t n,
                 int64_t m, int64_t c);
// out (m, c) row t += Σ_s gate·in (n, c) row slots[t·k+s]
void combine_rows(ThreadPool& pool, float* out, const float* in, const int32_t* slots, const float* gates, int64_t m,
                  int64_t k, int64_t n, int64_t c);
// dgates (m, k) = dout (m, c) row t · in (n, c) row slots[t·k+s]
void combine_gates_grad(ThreadPool& pool, float* dgates, const float* dout, const float* in, const int32_t* slots,
                        int64_t m, int64_t k, int64_t n, int64_t c);

}  // namespace axonn::cpu
