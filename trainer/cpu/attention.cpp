#include "trainer/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/gemm.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

void require_shape(const char* op, int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d) {
  require_nonnegative(op, "B", B);
  require_nonnegative(op, "T", T);
  require_nonnegative(op, "h", h);
  require_positive(op, "d", d);
  require_at_most(op, "h·d", h * d, "row stride ld", ld);
}

// Row t of the scores (T) in place: softmax over the keys j <= t, 0 for j > t. Inlined into
// the per-pair functions, so it is compiled for their instruction set.
[[gnu::always_inline]] inline void softmax_causal_row(float* row, int64_t t, int64_t T) {
  const int64_t n = t + 1;
  const float mx = max_floats(row, n);
  for (int64_t j = 0; j < n; ++j) row[j] = exp_approx(row[j] - mx);
  const float inv = static_cast<float>(1.0 / sum_floats(row, n));
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  std::fill(row + n, row + T, 0.0f);
}

// Row t of dP (in place) -> dS = P ⊙ (dP − Σ_j P·dP) over j <= t; 0 for t < j < end (the
// rest of the row block, which the dK and dV products read).
[[gnu::always_inline]] inline void softmax_backward_row(float* dp_row, const float* p_row, int64_t t, int64_t end) {
  const int64_t n = t + 1;
  const float dot = static_cast<float>(dot_floats(p_row, dp_row, n));
  for (int64_t j = 0; j < n; ++j) dp_row[j] = p_row[j] * (dp_row[j] - dot);
  std::fill(dp_row + n, dp_row + end, 0.0f);
}

struct Shape {
  int64_t ld, T, h, d;
};

// One (sequence b, head) pair.
AXONN_SIMD_CLONES void forward_pair(float* out, float* probs, const float* q, const float* k, const float* v,
                                    const Shape& s, int64_t b, int64_t head) {
  const int64_t ld = s.ld, T = s.T, h = s.h, d = s.d, hd = h * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t offset = b * T * ld + head * d;
  const float* qh = q + offset;  // (T, d), row stride ld
  const float* kh = k + offset;
  const float* vh = v + offset;
  float* p = probs + (b * h + head) * T * T;  // (T, T)
  float* oh = out + b * T * hd + head * d;    // (T, d), row stride h·d
  for (int64_t t0 = 0; t0 < T; t0 += kAttentionRowBlock) {
    const int64_t rows = std::min(kAttentionRowBlock, T - t0);
    const int64_t keys = t0 + rows;  // rows t0 .. t0+rows-1 see keys 0 .. keys-1
    // S (rows, keys) = Q[t0:] · K[:keys]^T / sqrt(d)
    gemm(Transpose::no, Transpose::yes, rows, keys, d, scale, qh + t0 * ld, ld, kh, ld, 0.0f, p + t0 * T, T);
    for (int64_t t = t0; t < keys; ++t) softmax_causal_row(p + t * T, t, T);
    // O[t0:] (rows, d) = P (rows, keys) · V[:keys]
    gemm(Transpose::no, Transpose::no, rows, d, keys, 1.0f, p + t0 * T, T, vh, ld, 0.0f, oh + t0 * hd, hd);
  }
}

// One (sequence b, head) pair; ds: (T, T) scratch for dP, then dS in place.
AXONN_SIMD_CLONES void backward_pair(float* dq, float* dk, float* dv, const float* dout, const float* probs,
                                     const float* q, const float* k, const float* v, const Shape& s, int64_t b,
                                     int64_t head, float* ds) {
  const int64_t ld = s.ld, T = s.T, h = s.h, d = s.d, hd = h * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t offset = b * T * ld + head * d;
  const float* qh = q + offset;
  const float* kh = k + offset;
  const float* vh = v + offset;
  float* dqh = dq + offset;
  float* dkh = dk + offset;
  float* dvh = dv + offset;
  const float* p = probs + (b * h + head) * T * T;
  const float* doh = dout + b * T * hd + head * d;  // (T, d), row stride h·d
  for (int64_t t0 = 0; t0 < T; t0 += kAttentionRowBlock) {
    const int64_t rows = std::min(kAttentionRowBlock, T - t0);
    const int64_t keys = t0 + rows;
    // dP (rows, keys) = dO[t0:] · V[:keys]^T
    gemm(Transpose::no, Transpose::yes, rows, keys, d, 1.0f, doh + t0 * hd, hd, vh, ld, 0.0f, ds + t0 * T, T);
    for (int64_t t = t0; t < keys; ++t) softmax_backward_row(ds + t * T, p + t * T, t, keys);
    // dQ[t0:] (rows, d) = dS (rows, keys) · K[:keys] / sqrt(d)
    gemm(Transpose::no, Transpose::no, rows, d, keys, scale, ds + t0 * T, T, kh, ld, 0.0f, dqh + t0 * ld, ld);
  }
  // Key rows j0 .. j0+cols-1 are seen by the queries j0 .. T-1 only.
  for (int64_t j0 = 0; j0 < T; j0 += kAttentionRowBlock) {
    const int64_t cols = std::min(kAttentionRowBlock, T - j0);
    const int64_t queries = T - j0;
    // dK[j0:] (cols, d) = dS[j0:, j0:j0+cols]^T · Q[j0:] / sqrt(d)
    gemm(Transpose::yes, Transpose::no, cols, d, queries, scale, ds + j0 * T + j0, T, qh + j0 * ld, ld, 0.0f,
         dkh + j0 * ld, ld);
    // dV[j0:] (cols, d) = P[j0:, j0:j0+cols]^T · dO[j0:]
    gemm(Transpose::yes, Transpose::no, cols, d, queries, 1.0f, p + j0 * T + j0, T, doh + j0 * hd, hd, 0.0f,
         dvh + j0 * ld, ld);
  }
}

// body(b, head) for every pair, the pairs split over the pool's threads; body also gets the
// index of the thread running it.
void for_each_pair(ThreadPool& pool, int64_t B, int64_t h, const std::function<void(int, int64_t, int64_t)>& body) {
  const int64_t pairs = B * h;
  if (pool.size() == 1 || pairs < 2) {
    for (int64_t pair = 0; pair < pairs; ++pair) body(0, pair / h, pair % h);
    return;
  }
  const SerialBlasScope serial_blas;
  const int64_t parts = pool.size();
  pool.run([&](int part) {
    for (int64_t pair = pairs * part / parts; pair < pairs * (part + 1) / parts; ++pair) body(part, pair / h, pair % h);
  });
}

}  // namespace

void attention_forward(ThreadPool& pool, float* out, float* probs, const float* q, const float* k, const float* v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d) {
  require_shape("attention_forward", ld, B, T, h, d);
  const Shape s{ld, T, h, d};
  for_each_pair(pool, B, h, [&](int, int64_t b, int64_t head) { forward_pair(out, probs, q, k, v, s, b, head); });
}

void attention_backward(ThreadPool& pool, float* dq, float* dk, float* dv, const float* dout, const float* probs,
                        const float* q, const float* k, const float* v, int64_t ld, int64_t B, int64_t T, int64_t h,
                        int64_t d, std::vector<float>& scratch) {
  require_shape("attention_backward", ld, B, T, h, d);
  const Shape s{ld, T, h, d};
  scratch.resize(static_cast<size_t>(pool.size() * T * T));
  for_each_pair(pool, B, h, [&](int part, int64_t b, int64_t head) {
    backward_pair(dq, dk, dv, dout, probs, q, k, v, s, b, head, scratch.data() + part * T * T);
  });
}

}  // namespace axonn::cpu
