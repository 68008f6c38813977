#pragma once
// LayerNorm over rows whose C columns are split over the x ranks: this rank holds x (m, c)
// and gamma, beta (c). The stages and the collectives between them are documented at
// Backend::layernorm_row_sums; with c = C and no collective they are a plain LayerNorm.
// Two passes (mean first, then centred squares) so the variance does not cancel. Rows are
// split over the pool's threads; the column sums of dgamma and dbeta are split by column.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// (1) sums (m) = Σ_j x[i, j]
void layernorm_row_sums(ThreadPool& pool, float* sums, const float* x, int64_t m, int64_t c);
// (1) after the residual add: x (m, c) = a + b (x may alias a or b), row by row while the
// row is in cache, then sums as above
void layernorm_residual_row_sums(ThreadPool& pool, float* x, float* sums, const float* a, const float* b, int64_t m,
                                 int64_t c);
// (2) mean (m) = sums / C (in place allowed); squares (m) = Σ_j (x[i, j] − mean[i])²
void layernorm_centered_squares(ThreadPool& pool, float* mean, float* squares, const float* sums, const float* x,
                                int64_t m, int64_t c, int64_t C);
// (3) rstd (m) = 1/sqrt(squares/C + eps) (in place allowed); out (m, c) = (x − mean)·rstd·gamma + beta
void layernorm_normalize(ThreadPool& pool, float* out, float* rstd, const float* x, const float* mean,
                         const float* squares, const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                         float eps);
// backward (1) partials (m, 2) = (Σ_j dout·gamma, Σ_j dout·gamma·x̂)
void layernorm_backward_partials(ThreadPool& pool, float* partials, const float* dout, const float* x,
                                 const float* mean, const float* rstd, const float* gamma, int64_t m, int64_t c);
// backward (2) dx (m, c) += rstd·(dout·gamma − (partials[i,0] + x̂·partials[i,1])/C);
// dgamma (c) += Σ_rows dout·x̂; dbeta (c) += Σ_rows dout (each column over the rows in order)
void layernorm_backward_finish(ThreadPool& pool, float* dx, float* dgamma, float* dbeta, const float* partials,
                               const float* dout, const float* x, const float* mean, const float* rstd,
                               const float* gamma, int64_t m, int64_t c, int64_t C);

}  // namespace axonn::cpu
