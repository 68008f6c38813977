#pragma once
// RMSNorm (Llama's normalization: no mean, no beta) over rows whose C columns are split over
// the x ranks: this rank holds x (m, c) and gamma (c). The stages and the collectives between
// them are documented at Backend::rmsnorm_row_squares; with c = C and no collective they are
// a plain RMSNorm. Rows are split over the pool's threads; dgamma's column sums by column.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// (1) squares (m) = Σ_j x[i, j]², in sum_squares_floats' fixed order
void rmsnorm_row_squares(ThreadPool& pool, float* squares, const float* x, int64_t m, int64_t c);
// (1) after the residual add: x (m, c) = a + b (x may alias a or b), row by row while the
// row is in cache, then squares as above
void rmsnorm_residual_row_squares(ThreadPool& pool, float* x, float* squares, const float* a, const float* b, int64_t m,
                                  int64_t c);
// (2) rstd (m) = 1/sqrt(squares/C + eps) (in place allowed); out (m, c) = x·rstd·gamma
void rmsnorm_normalize(ThreadPool& pool, float* out, float* rstd, const float* x, const float* squares,
                       const float* gamma, int64_t m, int64_t c, int64_t C, float eps);
// backward (1) partials (m) = Σ_j dout·gamma·x̂, x̂ = x·rstd
void rmsnorm_backward_partials(ThreadPool& pool, float* partials, const float* dout, const float* x, const float* rstd,
                               const float* gamma, int64_t m, int64_t c);
// backward (2) dx (m, c) += rstd·(dout·gamma − x̂·partials[i]/C); dgamma (c) += Σ_rows dout·x̂
// (each column over the rows in order)
void rmsnorm_backward_finish(ThreadPool& pool, float* dx, float* dgamma, const float* partials, const float* dout,
                             const float* x, const float* rstd, const float* gamma, int64_t m, int64_t c, int64_t C);

}  // namespace axonn::cpu
