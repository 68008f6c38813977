#pragma once
// The argument checks of the Backend ops, shared by every backend (trainer/cpu, trainer/cuda):
// a bad size throws a BackendError naming the op and the value instead of reading past a
// buffer, in the same words on every backend. O(1) per call. C++17: .cu files include it.
#include <cmath>
#include <cstdint>
#include <string>

#include "trainer/backend.hpp"

namespace axonn::op_checks {

[[noreturn]] inline void fail(const char* op, const std::string& what) {
  throw BackendError(std::string(op) + ": " + what);
}

inline void require_nonnegative(const char* op, const char* name, int64_t value) {
  if (value < 0) fail(op, std::string(name) + " = " + std::to_string(value) + " must not be negative");
}

inline void require_positive(const char* op, const char* name, int64_t value) {
  if (value <= 0) fail(op, std::string(name) + " = " + std::to_string(value) + " must be positive");
}

// A width against the full width it is a part of (LayerNorm's c <= C, a row against ld).
inline void require_at_most(const char* op, const char* name, int64_t value, const char* limit_name, int64_t limit) {
  if (value > limit)
    fail(op,
         std::string(name) + " = " + std::to_string(value) + " exceeds " + limit_name + " = " + std::to_string(limit));
}

// gemm: a stored matrix with `cols` columns; its row stride `ld` (named `name`) must hold a row.
inline void require_gemm_ld(const char* name, int64_t ld, int64_t cols) {
  if (ld < (cols > 1 ? cols : 1))
    fail("gemm",
         std::string(name) + " = " + std::to_string(ld) + " is smaller than the row length " + std::to_string(cols));
}

// LayerNorm stages: m rows of a local width c that is part of the full width C.
inline void require_layernorm_shape(const char* op, int64_t m, int64_t c, int64_t C) {
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  require_positive(op, "C", C);
  require_at_most(op, "local width c", c, "full width C", C);
}

// Attention: B sequences of T tokens, h query heads and kv key/value heads (h a multiple of
// kv: grouped-query attention, g = h/kv query heads per group) of size d, rows ld apart, the
// groups group_stride apart within a row (Backend::attention_forward). Within a row:
// - h·d <= ld: the query heads fit;
// - with kv > 1, group_stride >= g·d: one group's query heads end before the next group's
//   start (with kv = 1 there is one group and group_stride is never used);
// - (kv−1)·group_stride + g·d <= ld: the last group's last query head ends inside the row;
//   k and v, whose offsets from q are not known here, read (kv−1)·group_stride + d <= that
//   from their own start, so the same bound is the check for them too.
inline void require_attention_shape(const char* op, int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d,
                                    int64_t group_stride) {
  require_nonnegative(op, "B", B);
  require_nonnegative(op, "T", T);
  require_nonnegative(op, "h", h);
  require_nonnegative(op, "kv", kv);
  if (kv > h || (h > 0 && (kv == 0 || h % kv != 0)))
    fail(op, "h = " + std::to_string(h) + " query heads is not a multiple of kv = " + std::to_string(kv) +
                 " key/value heads");
  require_positive(op, "d", d);
  require_at_most(op, "h·d", h * d, "row stride ld", ld);
  require_nonnegative(op, "group_stride", group_stride);
  if (kv <= 1) return;
  const int64_t group_width = h / kv * d;  // g·d: one group's query heads
  if (group_stride < group_width)
    fail(op, "group_stride = " + std::to_string(group_stride) + " is smaller than the (h/kv)·d = " +
                 std::to_string(group_width) + " elements of one group's query heads: the groups would overlap");
  require_at_most(op, "(kv−1)·group_stride + (h/kv)·d", (kv - 1) * group_stride + group_width, "row stride ld", ld);
}

// SwiGLU: m rows of f outputs, from m rows of 2f (gate | up).
inline void require_swiglu_shape(const char* op, int64_t m, int64_t f) {
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "f", f);
}

// RoPE: B sequences of T tokens, `heads` heads of size d (even: rotated in pairs), rows ld apart.
inline void require_rope_shape(const char* op, int64_t B, int64_t T, int64_t heads, int64_t d, int64_t ld) {
  require_nonnegative(op, "B", B);
  require_nonnegative(op, "T", T);
  require_nonnegative(op, "heads", heads);
  require_positive(op, "d", d);
  if (d % 2 != 0)
    fail(op, "head size d = " + std::to_string(d) + " must be even (RoPE rotates element pairs (2i, 2i + 1))");
  require_at_most(op, "heads·d", heads * d, "row stride ld", ld);
}

// Vocab-parallel embedding: m tokens, width c, v_local table rows on this rank.
inline void require_embedding_sizes(const char* op, int64_t m, int64_t c, int64_t v_local) {
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  require_nonnegative(op, "v_local", v_local);
}

// Bias add and its column sums: m rows of n columns, ld apart.
inline void require_bias_shape(const char* op, int64_t m, int64_t n, int64_t ld) {
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "n", n);
  require_at_most(op, "n", n, "row stride ld", ld);
}

// Mixture of experts: top-1 (Switch) or top-2 routing only.
inline void require_top_k(const char* op, int64_t k) {
  if (k != 1 && k != 2) fail(op, "k = " + std::to_string(k) + " must be 1 or 2 (top-1 or top-2 routing)");
}

// The router's GEMMs: x (m, c) against w (c, E), E >= 1 experts.
inline void require_router_gemm_shape(const char* op, int64_t m, int64_t c, int64_t E) {
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  require_positive(op, "E", E);
}

// The router's rows: m tokens, each choosing k of E experts.
inline void require_router_shape(const char* op, int64_t m, int64_t E, int64_t k) {
  require_nonnegative(op, "m", m);
  require_positive(op, "E", E);
  require_top_k(op, k);
  require_at_most(op, "k", k, "experts E", E);
}

// Dispatch and combine: m token rows, n permuted rows, c columns, k slots per token.
inline void require_permute_shape(const char* op, int64_t m, int64_t n, int64_t c) {
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "n", n);
  require_nonnegative(op, "c", c);
}

// One AdamW step's scalars as every backend's update loop reads them.
struct AdamWConstants {
  float b1, b2, lr, eps, gs, wd, correction1, correction2;
};

// Checks an AdamW call (n elements) and derives its constants; `decay` applies the weight decay.
inline AdamWConstants adamw_constants(int64_t n, const AdamWStep& step, bool decay) {
  require_nonnegative("adamw", "n", n);
  require_positive("adamw", "step t", step.t);
  if (!(step.beta1 >= 0.0f && step.beta1 < 1.0f && step.beta2 >= 0.0f && step.beta2 < 1.0f))
    fail("adamw", "betas (" + std::to_string(step.beta1) + ", " + std::to_string(step.beta2) + ") must lie in [0, 1)");
  // Bias corrections in double: 1 − β^t loses digits in float for β close to 1.
  const double t = static_cast<double>(step.t);
  AdamWConstants k{};
  k.correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(step.beta1), t));
  k.correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(step.beta2), t));
  k.b1 = step.beta1;
  k.b2 = step.beta2;
  k.lr = step.lr;
  k.eps = step.eps;
  k.gs = step.grad_scale;
  k.wd = decay ? step.weight_decay : 0.0f;
  return k;
}

}  // namespace axonn::op_checks
