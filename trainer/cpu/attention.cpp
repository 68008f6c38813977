#include "trainer/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/gemm.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

static_assert(kAttentionKeyBlock % kAttentionRowBlock == 0,
              "a row block's key tiles must start at or before its first row: every row sees >= 1 key per tile");

constexpr int64_t kTile = kAttentionRowBlock * kAttentionKeyBlock;  // floats of one (rows, keys) tile

// One (sequence, head) pair: its rows of q, k, v (T, d) with row stride ld, of out and dout
// (T, d) with row stride h·d, and its lse (T). The gradients are views like q, k, v.
// Forward fills out and lse_out; backward reads o, dout and lse and fills dq, dk, dv.
struct Pair {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const float *o = nullptr, *dout = nullptr, *lse = nullptr;
  float *out = nullptr, *lse_out = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  int64_t ld = 0, hd = 0, T = 0, d = 0;
  float scale = 1.0f;  // 1/sqrt(d)
};

// Elements from the start of a row to head `head` of a view whose heads come per_group to a
// group, the groups group_stride apart: query heads per_group = h/kv, key/value heads 1.
int64_t head_offset(int64_t head, int64_t per_group, int64_t group_stride, int64_t d) {
  return head / per_group * group_stride + head % per_group * d;
}

// Pair b·h + head of the (B, T, h, d) query view with row stride ld, against its key/value
// head head/group of k and v, groups group_stride apart: the q, k, v views set, the rest left
// to the caller.
Pair pair_at(const float* q, const float* k, const float* v, int64_t ld, int64_t T, int64_t h, int64_t d, int64_t group,
             int64_t group_stride, int64_t b, int64_t head) {
  Pair p;
  p.ld = ld;
  p.hd = h * d;
  p.T = T;
  p.d = d;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.q = q + b * T * ld + head_offset(head, group, group_stride, d);
  p.k = k + b * T * ld + head / group * group_stride;
  p.v = v + b * T * ld + head / group * group_stride;
  return p;
}

// Keys of tile [j0, j0 + cols) that query t sees: j <= t. At least 1, since j0 <= t (see
// the static_assert).
[[gnu::always_inline]] inline int64_t visible(int64_t t, int64_t j0, int64_t cols) {
  return std::min(t - j0 + 1, cols);
}

// Query rows t0 .. t0+rows-1 of one pair: their output rows and lse. p: one tile of scratch,
// the scores S (rows, cols), then in place the unnormalized probabilities exp(S − max).
AXONN_SIMD_CLONES void forward_rows(const Pair& a, int64_t t0, float* p) {
  const int64_t ld = a.ld, hd = a.hd, d = a.d;
  const int64_t rows = std::min(kAttentionRowBlock, a.T - t0);
  const int64_t keys = t0 + rows;  // rows t0 .. t0+rows-1 see keys 0 .. keys-1
  float row_max[kAttentionRowBlock];
  double row_sum[kAttentionRowBlock];  // Σ exp(S − row_max) over the tiles so far
  float* o = a.out + t0 * hd;          // (rows, d), row stride h·d: the running Σ P·V
  for (int64_t j0 = 0; j0 < keys; j0 += kAttentionKeyBlock) {
    const int64_t cols = std::min(kAttentionKeyBlock, keys - j0);
    const bool first = j0 == 0;
    // S (rows, cols) = Q[t0:] · K[j0:j0+cols]^T / sqrt(d)
    gemm(Transpose::no, Transpose::yes, rows, cols, d, a.scale, a.q + t0 * ld, ld, a.k + j0 * ld, ld, 0.0f, p,
         kAttentionKeyBlock);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = p + r * kAttentionKeyBlock;
      const int64_t n = visible(t0 + r, j0, cols);
      const float old_max = first ? -std::numeric_limits<float>::infinity() : row_max[r];
      const float new_max = std::max(old_max, max_floats(row, n));
      for (int64_t j = 0; j < n; ++j) row[j] = exp_approx(row[j] - new_max);
      std::fill(row + n, row + cols, 0.0f);
      const double tile_sum = sum_floats(row, n);
      if (first) {
        row_sum[r] = tile_sum;
      } else {  // the earlier tiles were weighted by exp(−old_max): rescale them
        const float alpha = exp_approx(old_max - new_max);
        row_sum[r] = row_sum[r] * alpha + tile_sum;
        for (int64_t e = 0; e < d; ++e) o[r * hd + e] *= alpha;
      }
      row_max[r] = new_max;
    }
    // O[t0:] (rows, d) = P (rows, cols) · V[j0:j0+cols] + the earlier tiles' O
    gemm(Transpose::no, Transpose::no, rows, d, cols, 1.0f, p, kAttentionKeyBlock, a.v + j0 * ld, ld,
         first ? 0.0f : 1.0f, o, hd);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = static_cast<float>(1.0 / row_sum[r]);
    for (int64_t e = 0; e < d; ++e) o[r * hd + e] *= inv;
    a.lse_out[t0 + r] = row_max[r] + static_cast<float>(std::log(row_sum[r]));
  }
}

// Query rows t0 .. t0+rows-1 of one pair: dQ of the rows (overwritten), and their part of dK
// and dV of every key they see (added). p, ds: one tile of scratch each, for P and dP → dS.
AXONN_SIMD_CLONES void backward_rows(const Pair& a, int64_t t0, float* p, float* ds) {
  const int64_t ld = a.ld, hd = a.hd, d = a.d;
  const int64_t rows = std::min(kAttentionRowBlock, a.T - t0);
  const int64_t keys = t0 + rows;
  const float* q = a.q + t0 * ld;        // (rows, d), row stride ld
  const float* dout = a.dout + t0 * hd;  // (rows, d), row stride h·d
  float* dq = a.dq + t0 * ld;
  // D (rows) = Σ_e dO ⊙ O = Σ_j P·dP, the softmax backward's row term.
  float dot[kAttentionRowBlock];
  for (int64_t r = 0; r < rows; ++r) dot[r] = static_cast<float>(dot_floats(dout + r * hd, a.o + (t0 + r) * hd, d));
  for (int64_t j0 = 0; j0 < keys; j0 += kAttentionKeyBlock) {
    const int64_t cols = std::min(kAttentionKeyBlock, keys - j0);
    const float* k = a.k + j0 * ld;  // (cols, d), row stride ld
    // S (rows, cols) = Q · K^T / sqrt(d), then P = exp(S − lse) in place
    gemm(Transpose::no, Transpose::yes, rows, cols, d, a.scale, q, ld, k, ld, 0.0f, p, kAttentionKeyBlock);
    // dP (rows, cols) = dO · V^T, then dS = P ⊙ (dP − D) in place
    gemm(Transpose::no, Transpose::yes, rows, cols, d, 1.0f, dout, hd, a.v + j0 * ld, ld, 0.0f, ds, kAttentionKeyBlock);
    for (int64_t r = 0; r < rows; ++r) {
      float* prow = p + r * kAttentionKeyBlock;
      float* dsrow = ds + r * kAttentionKeyBlock;
      const int64_t n = visible(t0 + r, j0, cols);
      const float lse = a.lse[t0 + r], dr = dot[r];
      for (int64_t j = 0; j < n; ++j) {
        prow[j] = exp_approx(prow[j] - lse);
        dsrow[j] = prow[j] * (dsrow[j] - dr);
      }
      std::fill(prow + n, prow + cols, 0.0f);
      std::fill(dsrow + n, dsrow + cols, 0.0f);
    }
    // dQ (rows, d) = dS · K / sqrt(d) + the earlier tiles' dQ
    gemm(Transpose::no, Transpose::no, rows, d, cols, a.scale, ds, kAttentionKeyBlock, k, ld, j0 == 0 ? 0.0f : 1.0f, dq,
         ld);
    // dK[j0:] (cols, d) += dS^T · Q / sqrt(d);  dV[j0:] (cols, d) += P^T · dO
    gemm(Transpose::yes, Transpose::no, cols, d, rows, a.scale, ds, kAttentionKeyBlock, q, ld, 1.0f, a.dk + j0 * ld,
         ld);
    gemm(Transpose::yes, Transpose::no, cols, d, rows, 1.0f, p, kAttentionKeyBlock, dout, hd, 1.0f, a.dv + j0 * ld, ld);
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
  const int64_t parts = pool.size();
  pool.run([&](int part) {
    for (int64_t pair = pairs * part / parts; pair < pairs * (part + 1) / parts; ++pair) body(part, pair / h, pair % h);
  });
}

}  // namespace

void attention_forward(ThreadPool& pool, float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride,
                       std::vector<float>& scratch) {
  op_checks::require_attention_shape("attention_forward", ld, B, T, h, kv, d, group_stride);
  if (h == 0) return;
  const int64_t group = h / kv;  // query heads per key/value head
  scratch.resize(static_cast<size_t>(pool.size() * kTile));
  for_each_pair(pool, B, h, [&](int part, int64_t b, int64_t head) {
    Pair a = pair_at(q, k, v, ld, T, h, d, group, group_stride, b, head);
    a.out = out + b * T * a.hd + head * d;
    a.lse_out = lse + (b * h + head) * T;
    for (int64_t t0 = 0; t0 < T; t0 += kAttentionRowBlock) forward_rows(a, t0, scratch.data() + part * kTile);
  });
}

void attention_backward(ThreadPool& pool, float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, int64_t ld, int64_t B,
                        int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride,
                        std::vector<float>& scratch) {
  op_checks::require_attention_shape("attention_backward", ld, B, T, h, kv, d, group_stride);
  if (h == 0) return;
  const int64_t group = h / kv;  // query heads per key/value head
  scratch.resize(static_cast<size_t>(pool.size() * 2 * kTile));
  // One (sequence, key/value head) per task: its dK and dV gather a term from every row block
  // of every query head of its group that sees their key, so they start from 0.
  for_each_pair(pool, B, kv, [&](int part, int64_t b, int64_t kv_head) {
    const int64_t kv_offset = b * T * ld + kv_head * group_stride;
    for (int64_t t = 0; t < T; ++t) {
      std::fill(dk + kv_offset + t * ld, dk + kv_offset + t * ld + d, 0.0f);
      std::fill(dv + kv_offset + t * ld, dv + kv_offset + t * ld + d, 0.0f);
    }
    float* p = scratch.data() + part * 2 * kTile;
    for (int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
      Pair a = pair_at(q, k, v, ld, T, h, d, group, group_stride, b, head);
      const int64_t out_offset = b * T * a.hd + head * d;
      a.o = out + out_offset;
      a.dout = dout + out_offset;
      a.lse = lse + (b * h + head) * T;
      a.dq = dq + b * T * ld + head_offset(head, group, group_stride, d);
      a.dk = dk + kv_offset;
      a.dv = dv + kv_offset;
      for (int64_t t0 = 0; t0 < T; t0 += kAttentionRowBlock) backward_rows(a, t0, p, p + kTile);
    }
  });
}

}  // namespace axonn::cpu
