#include "trainer/model/row_norm.hpp"

namespace axonn {

void RowNorm::finish_forward(Backend& backend, Communicator& cols, ActPtr out, float* mean, float* rstd,
                             ConstActPtr x, const float* gamma, const float* beta, int64_t m, int64_t c,
                             int64_t C) const {
  const auto n = static_cast<size_t>(m);
  if (kind_ == Norm::rmsnorm) {
    cols.all_reduce(rstd, n, ElementType::float32);
    backend.rmsnorm_normalize(out, rstd, x, rstd, gamma, m, c, C, eps_);
    return;
  }
  cols.all_reduce(mean, n, ElementType::float32);
  backend.layernorm_centered_squares(mean, rstd, mean, x, m, c, C);
  cols.all_reduce(rstd, n, ElementType::float32);
  backend.layernorm_normalize(out, rstd, x, mean, rstd, gamma, beta, m, c, C, eps_);
}

void RowNorm::forward(Backend& backend, Communicator& cols, ActPtr out, float* mean, float* rstd, ConstActPtr x,
                      const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C) const {
  if (cols.size() == 1) {
    if (kind_ == Norm::rmsnorm)
      backend.rmsnorm_rows(out, rstd, x, gamma, m, C, eps_);
    else
      backend.layernorm_rows(out, mean, rstd, x, gamma, beta, m, C, eps_);
    return;
  }
  if (kind_ == Norm::rmsnorm)
    backend.rmsnorm_row_squares(rstd, x, m, c);
  else
    backend.layernorm_row_sums(mean, x, m, c);
  finish_forward(backend, cols, out, mean, rstd, x, gamma, beta, m, c, C);
}

void RowNorm::residual_forward(Backend& backend, Communicator& cols, ActPtr x, ActPtr out, float* mean, float* rstd,
                               ConstActPtr a, ConstActPtr b, const float* gamma, const float* beta, int64_t m,
                               int64_t c, int64_t C) const {
  if (cols.size() == 1) {
    if (kind_ == Norm::rmsnorm)
      backend.residual_rmsnorm_rows(x, out, rstd, a, b, gamma, m, C, eps_);
    else
      backend.residual_layernorm_rows(x, out, mean, rstd, a, b, gamma, beta, m, C, eps_);
    return;
  }
  if (kind_ == Norm::rmsnorm)
    backend.rmsnorm_residual_row_squares(x, rstd, a, b, m, c);
  else
    backend.layernorm_residual_row_sums(x, mean, a, b, m, c);
  finish_forward(backend, cols, out, mean, rstd, x, gamma, beta, m, c, C);
}

void RowNorm::backward(Backend& backend, Communicator& cols, ActPtr dx, float* dgamma, float* dbeta, float* partials,
                       ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd, const float* gamma,
                       int64_t m, int64_t c, int64_t C) const {
  if (kind_ == Norm::rmsnorm) {
    if (cols.size() == 1) {
      backend.rmsnorm_rows_backward(dx, dgamma, partials, dout, x, rstd, gamma, m, C);
      return;
    }
    backend.rmsnorm_backward_partials(partials, dout, x, rstd, gamma, m, c);
    cols.all_reduce(partials, static_cast<size_t>(m), ElementType::float32);
    backend.rmsnorm_backward_finish(dx, dgamma, partials, dout, x, rstd, gamma, m, c, C);
    return;
  }
  if (cols.size() == 1) {
    backend.layernorm_rows_backward(dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, C);
    return;
  }
  backend.layernorm_backward_partials(partials, dout, x, mean, rstd, gamma, m, c);
  cols.all_reduce(partials, static_cast<size_t>(2 * m), ElementType::float32);
  backend.layernorm_backward_finish(dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, c, C);
}

}  // namespace axonn
