#pragma once
// Mixture of experts on the GPU (Backend's "mixture of experts" ops): the router in float32
// whatever the activations' type, and the row permutations around the experts. Simple
// kernels, one thread per output element or row, or one warp per dot product; every sum
// runs in one fixed order (a thread's loop or a warp's fixed tree), never with atomics, so
// a result is the same bits on every run. x, dx, in, out and dout are activations of either
// storage type (act_storage.cuh); logits, probs, gates and the router weights are float32.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// logits (m, E) = x (m, c)·w (c, E): one thread per logit, the columns in order
void router_logits(const Context& ctx, float* logits, ConstActPtr x, const float* w, int64_t m, int64_t c, int64_t E);
// dw (c, E) += x^T·dlogits: one thread per element of dw, the m rows in order;
// dx (m, c) += dlogits·w^T: one thread per element of dx, the experts in order
void router_backward(const Context& ctx, ActPtr dx, float* dw, const float* dlogits, ConstActPtr x, const float* w,
                     int64_t m, int64_t c, int64_t E);
// One thread per token row: softmax (probs may alias logits), the top k and their gates
void router_top_k(const Context& ctx, float* probs, int32_t* experts, float* gates, const float* logits, int64_t m,
                  int64_t E, int64_t k);
// One thread per token row: dlogits (m, E) from dgates (m, k) and coef (E, or null)
void router_logits_grad(const Context& ctx, float* dlogits, const float* probs, const int32_t* experts,
                        const float* dgates, const float* coef, int64_t m, int64_t E, int64_t k);
// out (n, c) row j = in (m, c) row rows[j] (·scale[j])
void gather_rows(const Context& ctx, ActPtr out, ConstActPtr in, const int32_t* rows, const float* scale, int64_t n,
                 int64_t m, int64_t c);
// out (m, c) row t += Σ_s gate·in (n, c) row slots[t·k+s], the slots in order
void combine_rows(const Context& ctx, ActPtr out, ConstActPtr in, const int32_t* slots, const float* gates, int64_t m,
                  int64_t k, int64_t n, int64_t c);
// dgates (m, k): one warp per (token, slot) dot product over the c columns
void combine_gates_grad(const Context& ctx, float* dgates, ConstActPtr dout, ConstActPtr in, const int32_t* slots,
                        int64_t m, int64_t k, int64_t n, int64_t c);

}  // namespace axonn::cuda
