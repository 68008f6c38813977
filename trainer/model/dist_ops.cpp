#include "trainer/model/dist_ops.hpp"

namespace axonn {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // GPT-2's

// Stages 2 and 3 once `mean` holds this rank's row sums. mean holds the row sums until
// stage 2 turns them into means; rstd holds the centred squares until stage 3 turns them
// into 1/std (the backend allows both aliases).
void layernorm_from_row_sums(Backend& backend, Communicator& cols, ActPtr out, float* mean, float* rstd, ConstActPtr x,
                             const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C) {
  cols.all_reduce(mean, static_cast<size_t>(m), ElementType::float32);
  backend.layernorm_centered_squares(mean, rstd, mean, x, m, c, C);
  cols.all_reduce(rstd, static_cast<size_t>(m), ElementType::float32);
  backend.layernorm_normalize(out, rstd, x, mean, rstd, gamma, beta, m, c, C, kLayerNormEps);
}

}  // namespace

// With one rank holding the rows (G_x = 1) the collectives are no-ops and each LayerNorm is
// one backend op (one kernel on a GPU).

void layernorm_forward(Backend& backend, Communicator& cols, ActPtr out, float* mean, float* rstd, ConstActPtr x,
                       const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C) {
  if (cols.size() == 1) {
    backend.layernorm_rows(out, mean, rstd, x, gamma, beta, m, C, kLayerNormEps);
    return;
  }
  backend.layernorm_row_sums(mean, x, m, c);
  layernorm_from_row_sums(backend, cols, out, mean, rstd, x, gamma, beta, m, c, C);
}

void residual_layernorm_forward(Backend& backend, Communicator& cols, ActPtr x, ActPtr out, float* mean, float* rstd,
                                ConstActPtr a, ConstActPtr b, const float* gamma, const float* beta, int64_t m,
                                int64_t c, int64_t C) {
  if (cols.size() == 1) {
    backend.residual_layernorm_rows(x, out, mean, rstd, a, b, gamma, beta, m, C, kLayerNormEps);
    return;
  }
  backend.layernorm_residual_row_sums(x, mean, a, b, m, c);
  layernorm_from_row_sums(backend, cols, out, mean, rstd, x, gamma, beta, m, c, C);
}

void layernorm_backward(Backend& backend, Communicator& cols, ActPtr dx, float* dgamma, float* dbeta, float* partials,
                        ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd, const float* gamma,
                        int64_t m, int64_t c, int64_t C) {
  if (cols.size() == 1) {
    backend.layernorm_rows_backward(dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, C);
    return;
  }
  backend.layernorm_backward_partials(partials, dout, x, mean, rstd, gamma, m, c);
  cols.all_reduce(partials, static_cast<size_t>(2 * m), ElementType::float32);
  backend.layernorm_backward_finish(dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, c, C);
}

void cross_entropy_forward_backward(Backend& backend, Communicator& vocab, ActPtr logits, const int32_t* targets,
                                    int64_t m, int64_t v_local, int64_t v0, float scale,
                                    const CrossEntropyBuffers& buf) {
  if (vocab.size() == 1) {
    backend.cross_entropy_rows(buf.loss, logits, targets, m, v_local, scale, buf.max, buf.partials);
    return;
  }
  backend.cross_entropy_row_max(buf.row_max, logits, m, v_local);
  vocab.all_gather(buf.row_max, buf.gathered_max, static_cast<size_t>(m), ElementType::float32);
  backend.cross_entropy_partials(buf.partials, buf.max, logits, buf.gathered_max, vocab.size(), logits, targets, m,
                                 v_local, v0);
  vocab.all_reduce(buf.partials, static_cast<size_t>(2 * m), ElementType::float32);
  backend.cross_entropy_loss(buf.loss, buf.partials, buf.max, m);
  backend.cross_entropy_backward(logits, logits, buf.partials, targets, m, v_local, v0, scale);
}

}  // namespace axonn
