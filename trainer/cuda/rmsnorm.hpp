#pragma once
// RMSNorm (Llama's: no mean, no beta) over rows whose C columns are split over the x ranks:
// this rank holds x (m, c) and gamma (c). The stages and the collectives between them are
// documented at Backend::rmsnorm_row_squares. As layernorm.hpp: one warp per row for the row
// stages (a row's sum is one warp's fixed-order tree), dgamma's column sums in two passes
// (column_sums.hpp), so every result is the same bits on every run. The rows (x, out, dout,
// dx) are activations of either storage type (act_storage.cuh), one type per call; the
// statistics and gamma are float32.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// (1) squares (m) = Σ_j x[i, j]²
void rmsnorm_row_squares(const Context& ctx, float* squares, ConstActPtr x, int64_t m, int64_t c);
// (1) after x (m, c) = a + b (x may alias a or b), summed as stored
void rmsnorm_residual_row_squares(const Context& ctx, ActPtr x, float* squares, ConstActPtr a, ConstActPtr b, int64_t m,
                                  int64_t c);
// (2) rstd (m) = 1/sqrt(squares/C + eps) (rstd may alias squares); out = x·rstd·gamma
void rmsnorm_normalize(const Context& ctx, ActPtr out, float* rstd, ConstActPtr x, const float* squares,
                       const float* gamma, int64_t m, int64_t c, int64_t C, float eps);
// backward (1) partials (m) = Σ_j dout·gamma·x̂, x̂ = x·rstd
void rmsnorm_backward_partials(const Context& ctx, float* partials, ConstActPtr dout, ConstActPtr x, const float* rstd,
                               const float* gamma, int64_t m, int64_t c);
// backward (2) dx (m, c) += rstd·(dout·gamma − x̂·partials[i]/C); dgamma (c) += Σ_rows dout·x̂
void rmsnorm_backward_finish(const Context& ctx, ActPtr dx, float* dgamma, const float* partials, ConstActPtr dout,
                             ConstActPtr x, const float* rstd, const float* gamma, int64_t m, int64_t c, int64_t C);

// Whole rows (c = C), one kernel each for the row work: the stages above back to back in one
// warp per row, the same bits (Backend::rmsnorm_rows and its neighbours).
void rmsnorm_rows(const Context& ctx, ActPtr out, float* rstd, ConstActPtr x, const float* gamma, int64_t m, int64_t C,
                  float eps);
void residual_rmsnorm_rows(const Context& ctx, ActPtr x, ActPtr out, float* rstd, ConstActPtr a, ConstActPtr b,
                           const float* gamma, int64_t m, int64_t C, float eps);
void rmsnorm_rows_backward(const Context& ctx, ActPtr dx, float* dgamma, float* partials, ConstActPtr dout,
                           ConstActPtr x, const float* rstd, const float* gamma, int64_t m, int64_t C);

}  // namespace axonn::cuda
