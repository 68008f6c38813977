#pragma once
// The backend's staged ops with their collectives in between (docs/parallel-plan.md,
// "Everything else"): LayerNorm over rows whose columns are split over x, and the
// vocab-parallel softmax cross-entropy over y. With groups of one they equal the plain ops
// (LayerNorm: the backend's whole-row ops).
#include <cstdint>

#include "comm/communicator.hpp"
#include "trainer/backend.hpp"

namespace axonn {

// LayerNorm of x (m, c) whose full rows (width C) are split over `cols` (the x group):
// out (m, c); mean, rstd (m) are saved for backward. Two all-reduces of [m] floats.
void layernorm_forward(Backend& backend, Communicator& cols, ActPtr out, float* mean, float* rstd, ConstActPtr x,
                       const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C);

// The same on x = a + b, the residual add fused into the first stage: x (m, c) is written
// (and kept: it is the residual stream) and may alias a or b.
void residual_layernorm_forward(Backend& backend, Communicator& cols, ActPtr x, ActPtr out, float* mean, float* rstd,
                                ConstActPtr a, ConstActPtr b, const float* gamma, const float* beta, int64_t m,
                                int64_t c, int64_t C);

// dx (m, c) += the input gradient; dgamma, dbeta (c) += their gradients. partials: (m, 2)
// scratch. One all-reduce of [m, 2] floats.
void layernorm_backward(Backend& backend, Communicator& cols, ActPtr dx, float* dgamma, float* dbeta, float* partials,
                        ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd, const float* gamma,
                        int64_t m, int64_t c, int64_t C);

// Buffers of the vocab-parallel cross-entropy for m rows of v_local logits.
struct CrossEntropyBuffers {
  float* row_max;       // (m)
  float* gathered_max;  // (G_y, m)
  float* max;           // (m)
  float* partials;      // (m, 2): Σ exp, target logit
  float* loss;          // (m)
};

// loss (m) = −log softmax(logits)[target] over the whole vocabulary, whose columns are split
// over `vocab` (the y group; this rank holds [v0, v0 + v_local)), and its gradient at once:
// logits (m, v_local) are replaced by dlogits = (softmax − onehot)·scale. An all-gather of
// [m] maxima and an all-reduce of [m, 2] floats; with one vocab rank, one backend op.
void cross_entropy_forward_backward(Backend& backend, Communicator& vocab, ActPtr logits, const int32_t* targets,
                                    int64_t m, int64_t v_local, int64_t v0, float scale,
                                    const CrossEntropyBuffers& buf);

}  // namespace axonn
