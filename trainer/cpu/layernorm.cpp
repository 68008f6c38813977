#include "trainer/cpu/layernorm.hpp"

#include <cmath>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

void require_shape(const char* op, int64_t m, int64_t c, int64_t C) {
  require_nonnegative(op, "m", m);
  require_nonnegative(op, "c", c);
  require_positive(op, "C", C);
  require_at_most(op, "local width c", c, "full width C", C);
}

}  // namespace

void layernorm_row_sums(float* sums, const float* x, int64_t m, int64_t c) {
  require_nonnegative("layernorm_row_sums", "m", m);
  require_nonnegative("layernorm_row_sums", "c", c);
  for (int64_t i = 0; i < m; ++i) sums[i] = static_cast<float>(sum_floats(x + i * c, c));
}

void layernorm_centered_squares(float* mean, float* squares, const float* sums, const float* x, int64_t m, int64_t c,
                                int64_t C) {
  require_shape("layernorm_centered_squares", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  for (int64_t i = 0; i < m; ++i) {
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

void layernorm_normalize(float* out, float* rstd, const float* x, const float* mean, const float* squares,
                         const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C, float eps) {
  require_shape("layernorm_normalize", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  for (int64_t i = 0; i < m; ++i) {
    const float s = 1.0f / std::sqrt(squares[i] * inv_C + eps);
    rstd[i] = s;
    const float mu = mean[i];
    const float* row = x + i * c;
    float* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = (row[j] - mu) * s * gamma[j] + beta[j];
  }
}

void layernorm_backward_partials(float* partials, const float* dout, const float* x, const float* mean,
                                 const float* rstd, const float* gamma, int64_t m, int64_t c) {
  require_nonnegative("layernorm_backward_partials", "m", m);
  require_nonnegative("layernorm_backward_partials", "c", c);
  for (int64_t i = 0; i < m; ++i) {
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

void layernorm_backward_finish(float* dx, float* dgamma, float* dbeta, const float* partials, const float* dout,
                               const float* x, const float* mean, const float* rstd, const float* gamma, int64_t m,
                               int64_t c, int64_t C) {
  require_shape("layernorm_backward_finish", m, c, C);
  const float inv_C = 1.0f / static_cast<float>(C);
  for (int64_t i = 0; i < m; ++i) {
    const float mu = mean[i], s = rstd[i];
    const float mean_g = partials[2 * i] * inv_C;       // (1/C) Σ dout·gamma over the full row
    const float mean_gx = partials[2 * i + 1] * inv_C;  // (1/C) Σ dout·gamma·x̂
    const float* row = x + i * c;
    const float* dy = dout + i * c;
    float* d = dx + i * c;
    // Two loops, each with few enough pointers for the vectorizer's aliasing checks.
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (row[j] - mu) * s;
      d[j] += s * (dy[j] * gamma[j] - mean_g - xhat * mean_gx);
    }
    for (int64_t j = 0; j < c; ++j) {
      dgamma[j] += dy[j] * ((row[j] - mu) * s);
      dbeta[j] += dy[j];
    }
  }
}

}  // namespace axonn::cpu
