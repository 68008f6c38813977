#pragma once
// LayerNorm over rows whose C columns are split over the x ranks: this rank holds x (m, c)
// and gamma, beta (c). The stages and the collectives between them are documented at
// Backend::layernorm_row_sums. One warp per row for the row stages (a row's sums are one
// warp's fixed-order tree); dgamma/dbeta are column sums done in two passes
// (column_sums.hpp), so every result is the same bits on every run. The rows (x, out, dout,
// dx) are activations of either storage type (act_storage.cuh), one type per call; the
// statistics and parameters are float32.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// (1) sums (m) = Σ_j x[i, j]
void layernorm_row_sums(const Context& ctx, float* sums, ConstActPtr x, int64_t m, int64_t c);
void layernorm_residual_row_sums(const Context& ctx, ActPtr x, float* sums, ConstActPtr a, ConstActPtr b, int64_t m,
                                 int64_t c);
// (2) mean (m) = sums / C (mean may alias sums); squares (m) = Σ_j (x[i, j] − mean[i])²
void layernorm_centered_squares(const Context& ctx, float* mean, float* squares, const float* sums, ConstActPtr x,
                                int64_t m, int64_t c, int64_t C);
// (3) rstd (m) = 1/sqrt(squares/C + eps) (rstd may alias squares); out = (x − mean)·rstd·gamma + beta
void layernorm_normalize(const Context& ctx, ActPtr out, float* rstd, ConstActPtr x, const float* mean,
                         const float* squares, const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                         float eps);
// backward (1) partials (m, 2) = (Σ_j dout·gamma, Σ_j dout·gamma·x̂)
void layernorm_backward_partials(const Context& ctx, float* partials, ConstActPtr dout, ConstActPtr x,
                                 const float* mean, const float* rstd, const float* gamma, int64_t m, int64_t c);
// backward (2) dx (m, c) += rstd·(dout·gamma − (partials[i,0] + x̂·partials[i,1])/C);
// dgamma (c) += Σ_rows dout·x̂; dbeta (c) += Σ_rows dout
void layernorm_backward_finish(const Context& ctx, ActPtr dx, float* dgamma, float* dbeta, const float* partials,
                               ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd,
                               const float* gamma, int64_t m, int64_t c, int64_t C);

// Whole rows (c = C), one kernel each for the row work: the stages above back to back in
// one warp per row, the same bits (Backend::layernorm_rows and its neighbours).
void layernorm_rows(const Context& ctx, ActPtr out, float* mean, float* rstd, ConstActPtr x, const float* gamma,
                    const float* beta, int64_t m, int64_t C, float eps);
void residual_layernorm_rows(const Context& ctx, ActPtr x, ActPtr out, float* mean, float* rstd, ConstActPtr a,
                             ConstActPtr b, const float* gamma, const float* beta, int64_t m, int64_t C, float eps);
void layernorm_rows_backward(const Context& ctx, ActPtr dx, float* dgamma, float* dbeta, float* partials,
                             ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd, const float* gamma,
                             int64_t m, int64_t C);

}  // namespace axonn::cuda
