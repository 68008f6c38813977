#include "trainer/cpu/rmsnorm.hpp"

#include <cmath>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

AXONN_SIMD_CLONES void row_squares(float* squares, const float* x, int64_t c, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) squares[i] = static_cast<float>(sum_squares_floats(x + i * c, c));
}

AXONN_SIMD_CLONES void residual_row_squares(float* x, float* squares, const float* a, const float* b, int64_t c,
                                            int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float* row = x + i * c;
    const float* ra = a + i * c;
    const float* rb = b + i * c;
    for (int64_t j = 0; j < c; ++j) row[j] = ra[j] + rb[j];
    squares[i] = static_cast<float>(sum_squares_floats(row, c));
  }
}

AXONN_SIMD_CLONES void normalize(float* out, float* rstd, const float* x, const float* squares, const float* gamma,
                                 int64_t c, float inv_C, float eps, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float s = 1.0f / std::sqrt(squares[i] * inv_C + eps);
    rstd[i] = s;
    const float* row = x + i * c;
    float* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = row[j] * s * gamma[j];
  }
}

AXONN_SIMD_CLONES void backward_partials(float* partials, const float* dout, const float* x, const float* rstd,
                                         const float* gamma, int64_t c, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float s = rstd[i];
    const float* row = x + i * c;
    const float* dy = dout + i * c;
    float lane[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= c; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += dy[j + l] * gamma[j + l] * (row[j + l] * s);
    float total = 0.0f;
    for (; j < c; ++j) total += dy[j] * gamma[j] * (row[j] * s);
    for (int64_t l = 0; l < kLanes; ++l) total += lane[l];
    partials[i] = total;
  }
}

AXONN_SIMD_CLONES void backward_dx(float* dx, const float* partials, const float* dout, const float* x,
                                   const float* rstd, const float* gamma, int64_t c, float inv_C, int64_t begin,
                                   int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float s = rstd[i];
    const float mean_gx = partials[i] * inv_C;  // (1/C) Σ dout·gamma·x̂ over the full row
    const float* row = x + i * c;
    const float* dy = dout + i * c;
    float* d = dx + i * c;
    for (int64_t j = 0; j < c; ++j) d[j] += s * (dy[j] * gamma[j] - (row[j] * s) * mean_gx);
  }
}

// Columns [j0, j1) of dgamma, the rows added in order.
AXONN_SIMD_CLONES void backward_dgamma(float* dgamma, const float* dout, const float* x, const float* rstd, int64_t m,
                                       int64_t c, int64_t j0, int64_t j1) {
  for (int64_t i = 0; i < m; ++i) {
    const float s = rstd[i];
    const float* row = x + i * c;
    const float* dy = dout + i * c;
    for (int64_t j = j0; j < j1; ++j) dgamma[j] += dy[j] * (row[j] * s);
  }
}

}  // namespace

void rmsnorm_row_squares(ThreadPool& pool, float* squares, const float* x, int64_t m, int64_t c) {
  require_nonnegative("rmsnorm_row_squares", "m", m);
  require_nonnegative("rmsnorm_row_squares", "c", c);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) { row_squares(squares, x, c, begin, end); });
}

void rmsnorm_residual_row_squares(ThreadPool& pool, float* x, float* squares, const float* a, const float* b, int64_t m,
                                  int64_t c) {
  require_nonnegative("rmsnorm_residual_row_squares", "m", m);
  require_nonnegative("rmsnorm_residual_row_squares", "c", c);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) { residual_row_squares(x, squares, a, b, c, begin, end); });
}

void rmsnorm_normalize(ThreadPool& pool, float* out, float* rstd, const float* x, const float* squares,
                       const float* gamma, int64_t m, int64_t c, int64_t C, float eps) {
  op_checks::require_layernorm_shape("rmsnorm_normalize", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) {
    normalize(out, rstd, x, squares, gamma, c, inv_C, eps, begin, end);
  });
}

void rmsnorm_backward_partials(ThreadPool& pool, float* partials, const float* dout, const float* x, const float* rstd,
                               const float* gamma, int64_t m, int64_t c) {
  require_nonnegative("rmsnorm_backward_partials", "m", m);
  require_nonnegative("rmsnorm_backward_partials", "c", c);
  parallel_rows(pool, m, c,
                [&](int64_t begin, int64_t end) { backward_partials(partials, dout, x, rstd, gamma, c, begin, end); });
}

void rmsnorm_backward_finish(ThreadPool& pool, float* dx, float* dgamma, const float* partials, const float* dout,
                             const float* x, const float* rstd, const float* gamma, int64_t m, int64_t c, int64_t C) {
  op_checks::require_layernorm_shape("rmsnorm_backward_finish", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) {
    backward_dx(dx, partials, dout, x, rstd, gamma, c, inv_C, begin, end);
  });
  // Split over columns, not rows: every column keeps its serial order of additions.
  parallel_for(pool, c, (kMinParallelElements + m) / (m > 0 ? m : 1), kCacheLineFloats,
               [&](int64_t j0, int64_t j1) { backward_dgamma(dgamma, dout, x, rstd, m, c, j0, j1); });
}

}  // namespace axonn::cpu
