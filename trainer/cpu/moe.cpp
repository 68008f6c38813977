#include "trainer/cpu/moe.hpp"

#include <algorithm>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/gemm.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"
#include "trainer/top_k_gates.hpp"

namespace axonn::cpu {
namespace {

// A router row costs about this many additions per expert (an exp, a division, compares).
constexpr int64_t kRouterWorkPerExpert = 64;

bool in_range(int64_t index, int64_t size) { return index >= 0 && index < size; }

// Row i of probs (E) = softmax of row i of logits, written in place when they alias: each
// element is read before it is overwritten. Then the k largest, ties to the lower index
// (strict >), and their gates.
AXONN_SIMD_CLONES void top_k_rows(float* probs, int32_t* experts, float* gates, const float* logits, int64_t E,
                                  int64_t k, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float* l = logits + i * E;
    float* p = probs + i * E;
    const float mx = max_floats(l, E);
    for (int64_t j = 0; j < E; ++j) p[j] = exp_approx(l[j] - mx);
    const auto total = static_cast<float>(sum_floats(p, E));
    for (int64_t j = 0; j < E; ++j) p[j] = p[j] / total;
    top_k_gates(p, E, k, experts + i * k, gates + i * k);
  }
}

// dlogits row i: the gates' gradient taken back to their probabilities (added to coef at
// their experts), then through the softmax. An expert index outside [0, E) adds nothing.
void logits_grad_rows(float* dlogits, const float* probs, const int32_t* experts, const float* dgates,
                      const float* coef, int64_t E, int64_t k, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float* p = probs + i * E;
    const int64_t e0 = experts[i * k], e1 = k == 2 ? experts[i * k + 1] : -1;
    const GateGradient g = top_k_gates_gradient(p, E, k, e0, e1, dgates + i * k);
    const float d0 = g.d0, d1 = g.d1;  // d/dp of experts e0 and e1
    auto dprob = [&](int64_t j) {
      float d = coef != nullptr ? coef[j] : 0.0f;
      if (j == e0) d += d0;
      if (j == e1) d += d1;
      return d;
    };
    float dot = 0.0f;  // Σ_j p_j·dprobs_j, in expert order
    for (int64_t j = 0; j < E; ++j) dot += p[j] * dprob(j);
    float* out = dlogits + i * E;
    for (int64_t j = 0; j < E; ++j) out[j] = p[j] * (dprob(j) - dot);
  }
}

AXONN_SIMD_CLONES void gather_row(float* out, const float* in, float scale, bool scaled, int64_t c) {
  if (scaled)
    for (int64_t j = 0; j < c; ++j) out[j] = in[j] * scale;
  else
    std::copy(in, in + c, out);
}

AXONN_SIMD_CLONES void add_row(float* out, const float* in, float gate, bool gated, int64_t c) {
  if (gated)
    for (int64_t j = 0; j < c; ++j) out[j] += gate * in[j];
  else
    for (int64_t j = 0; j < c; ++j) out[j] += in[j];
}

AXONN_SIMD_CLONES float row_dot(const float* a, const float* b, int64_t c) {
  return static_cast<float>(dot_floats(a, b, c));
}

}  // namespace

void router_logits(float* logits, const float* x, const float* w, int64_t m, int64_t c, int64_t E) {
  op_checks::require_router_gemm_shape("router_logits", m, c, E);
  gemm(Transpose::no, Transpose::no, m, E, c, 1.0f, x, c, w, E, 0.0f, logits, E);
}

void router_backward(float* dx, float* dw, const float* dlogits, const float* x, const float* w, int64_t m, int64_t c,
                     int64_t E) {
  op_checks::require_router_gemm_shape("router_backward", m, c, E);
  gemm(Transpose::yes, Transpose::no, c, E, m, 1.0f, x, c, dlogits, E, 1.0f, dw, E);
  gemm(Transpose::no, Transpose::yes, m, c, E, 1.0f, dlogits, E, w, E, 1.0f, dx, c);
}

void router_top_k(ThreadPool& pool, float* probs, int32_t* experts, float* gates, const float* logits, int64_t m,
                  int64_t E, int64_t k) {
  op_checks::require_router_shape("router_top_k", m, E, k);
  parallel_rows(pool, m, E * kRouterWorkPerExpert,
                [&](int64_t begin, int64_t end) { top_k_rows(probs, experts, gates, logits, E, k, begin, end); });
}

void router_logits_grad(ThreadPool& pool, float* dlogits, const float* probs, const int32_t* experts,
                        const float* dgates, const float* coef, int64_t m, int64_t E, int64_t k) {
  op_checks::require_router_shape("router_logits_grad", m, E, k);
  parallel_rows(pool, m, E * 4, [&](int64_t begin, int64_t end) {
    logits_grad_rows(dlogits, probs, experts, dgates, coef, E, k, begin, end);
  });
}

void gather_rows(ThreadPool& pool, float* out, const float* in, const int32_t* rows, const float* scale, int64_t n,
                 int64_t m, int64_t c) {
  op_checks::require_permute_shape("gather_rows", m, n, c);
  parallel_rows(pool, n, c, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const int64_t r = rows[j];
      float* o = out + j * c;
      if (in_range(r, m))
        gather_row(o, in + r * c, scale != nullptr ? scale[j] : 1.0f, scale != nullptr, c);
      else
        std::fill(o, o + c, 0.0f);
    }
  });
}

void combine_rows(ThreadPool& pool, float* out, const float* in, const int32_t* slots, const float* gates, int64_t m,
                  int64_t k, int64_t n, int64_t c) {
  op_checks::require_top_k("combine_rows", k);
  op_checks::require_permute_shape("combine_rows", m, n, c);
  // Each output row is one thread's, its slots added in order.
  parallel_rows(pool, m, k * c, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t s = 0; s < k; ++s) {
        const int64_t slot = slots[t * k + s];
        if (in_range(slot, n))
          add_row(out + t * c, in + slot * c, gates != nullptr ? gates[t * k + s] : 1.0f, gates != nullptr, c);
      }
  });
}

void combine_gates_grad(ThreadPool& pool, float* dgates, const float* dout, const float* in, const int32_t* slots,
                        int64_t m, int64_t k, int64_t n, int64_t c) {
  op_checks::require_top_k("combine_gates_grad", k);
  op_checks::require_permute_shape("combine_gates_grad", m, n, c);
  parallel_rows(pool, m, k * c, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t s = 0; s < k; ++s) {
        const int64_t slot = slots[t * k + s];
        dgates[t * k + s] = in_range(slot, n) ? row_dot(dout + t * c, in + slot * c, c) : 0.0f;
      }
  });
}

}  // namespace axonn::cpu
