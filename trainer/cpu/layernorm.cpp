#include "trainer/cpu/layernorm.hpp"

#include <cmath>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {
AXONN_SIMD_CLONES void row_sums(float* sums, const float* x, int64_t c, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) sums[i] = static_cast<float>(sum_floats(x + i * c, c));
}

AXONN_SIMD_CLONES void residual_row_sums(float* x, float* sums, const float* a, const float* b, int64_t c,
                                         int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float* row = x + i * c;
    const float* ra = a + i * c;
    const float* rb = b + i * c;
    for (int64_t j = 0; j < c; ++j) row[j] = ra[j] + rb[j];
    sums[i] = static_cast<float>(sum_floats(row, c));
  }
}

AXONN_SIMD_CLONES void centered_squares(float* mean, float* squares, const float* sums, const float* x, int64_t c,
                                        float inv_C, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float mu = sums[i] * inv_C;
    mean[i] = mu;
    const float* row = x + i * c;
    float lane[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= c; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        const float dev = row[j + l] - mu;
        lane[l] += dev * dev;
      }
    float total = 0.0f;
    for (; j < c; ++j) total += (row[j] - mu) * (row[j] - mu);
    for (int64_t l = 0; l < kLanes; ++l) total += lane[l];
    squares[i] = total;
  }
}

AXONN_SIMD_CLONES void normalize(float* out, float* rstd, const float* x, const float* mean, const float* squares,
                                 const float* gamma, const float* beta, int64_t c, float inv_C, float eps,
                                 int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float s = 1.0f / std::sqrt(squares[i] * inv_C + eps);
    rstd[i] = s;
    const float mu = mean[i];
    const float* row = x + i * c;
    float* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = (row[j] - mu) * s * gamma[j] + beta[j];
  }
}

AXONN_SIMD_CLONES void backward_partials(float* partials, const float* dout, const float* x, const float* mean,
                                         const float* rstd, const float* gamma, int64_t c, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float mu = mean[i], s = rstd[i];
    const float* row = x + i * c;
    const float* dy = dout + i * c;
    float dg[kLanes] = {}, dgx[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= c; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        const float g = dy[j + l] * gamma[j + l];
        dg[l] += g;
        dgx[l] += g * ((row[j + l] - mu) * s);
      }
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (; j < c; ++j) {
      const float g = dy[j] * gamma[j];
      sum_g += g;
      sum_gx += g * ((row[j] - mu) * s);
    }
    for (int64_t l = 0; l < kLanes; ++l) {
      sum_g += dg[l];
      sum_gx += dgx[l];
    }
    partials[2 * i] = sum_g;
    partials[2 * i + 1] = sum_gx;
  }
}

AXONN_SIMD_CLONES void backward_dx(float* dx, const float* partials, const float* dout, const float* x,
                                   const float* mean, const float* rstd, const float* gamma, int64_t c, float inv_C,
                                   int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float mu = mean[i], s = rstd[i];
    const float mean_g = partials[2 * i] * inv_C;       // (1/C) Σ dout·gamma over the full row
    const float mean_gx = partials[2 * i + 1] * inv_C;  // (1/C) Σ dout·gamma·x̂
    const float* row = x + i * c;
    const float* dy = dout + i * c;
    float* d = dx + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (row[j] - mu) * s;
      d[j] += s * (dy[j] * gamma[j] - mean_g - xhat * mean_gx);
    }
  }
}

// Columns [j0, j1) of dgamma and dbeta, the rows added in order.
AXONN_SIMD_CLONES void backward_dgamma(float* dgamma, float* dbeta, const float* dout, const float* x,
                                       const float* mean, const float* rstd, int64_t m, int64_t c, int64_t j0,
                                       int64_t j1) {
  for (int64_t i = 0; i < m; ++i) {
    const float mu = mean[i], s = rstd[i];
    const float* row = x + i * c;
    const float* dy = dout + i * c;
    for (int64_t j = j0; j < j1; ++j) {
      dgamma[j] += dy[j] * ((row[j] - mu) * s);
      dbeta[j] += dy[j];
    }
  }
}

}  // namespace

void layernorm_row_sums(ThreadPool& pool, float* sums, const float* x, int64_t m, int64_t c) {
  require_nonnegative("layernorm_row_sums", "m", m);
  require_nonnegative("layernorm_row_sums", "c", c);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) { row_sums(sums, x, c, begin, end); });
}

void layernorm_residual_row_sums(ThreadPool& pool, float* x, float* sums, const float* a, const float* b, int64_t m,
                                 int64_t c) {
  require_nonnegative("layernorm_residual_row_sums", "m", m);
  require_nonnegative("layernorm_residual_row_sums", "c", c);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) { residual_row_sums(x, sums, a, b, c, begin, end); });
}

void layernorm_centered_squares(ThreadPool& pool, float* mean, float* squares, const float* sums, const float* x,
                                int64_t m, int64_t c, int64_t C) {
  op_checks::require_layernorm_shape("layernorm_centered_squares", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  parallel_rows(pool, m, c,
                [&](int64_t begin, int64_t end) { centered_squares(mean, squares, sums, x, c, inv_C, begin, end); });
}

void layernorm_normalize(ThreadPool& pool, float* out, float* rstd, const float* x, const float* mean,
                         const float* squares, const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                         float eps) {
  op_checks::require_layernorm_shape("layernorm_normalize", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) {
    normalize(out, rstd, x, mean, squares, gamma, beta, c, inv_C, eps, begin, end);
  });
}

void layernorm_backward_partials(ThreadPool& pool, float* partials, const float* dout, const float* x,
                                 const float* mean, const float* rstd, const float* gamma, int64_t m, int64_t c) {
  require_nonnegative("layernorm_backward_partials", "m", m);
  require_nonnegative("layernorm_backward_partials", "c", c);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) {
    backward_partials(partials, dout, x, mean, rstd, gamma, c, begin, end);
  });
}

void layernorm_backward_finish(ThreadPool& pool, float* dx, float* dgamma, float* dbeta, const float* partials,
                               const float* dout, const float* x, const float* mean, const float* rstd,
                               const float* gamma, int64_t m, int64_t c, int64_t C) {
  op_checks::require_layernorm_shape("layernorm_backward_finish", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) {
    backward_dx(dx, partials, dout, x, mean, rstd, gamma, c, inv_C, begin, end);
  });
  // Split over columns, not rows: every column keeps its serial order of additions.
  parallel_for(pool, c, (kMinParallelElements + m) / (m > 0 ? m : 1), kCacheLineFloats,
               [&](int64_t j0, int64_t j1) { backward_dgamma(dgamma, dbeta, dout, x, mean, rstd, m, c, j0, j1); });
}

}  // namespace axonn::cpu
