#pragma once
// The normalization layers (model.norm) over rows whose columns are split over x: LayerNorm
// (GPT-2) or RMSNorm (Llama), the backend's stages with their all-reduces in between
// (docs/parallel-plan.md, "Everything else"). On this rank x (m, c), c = C/G_x, and gamma,
// beta (c). With one rank holding the rows (G_x = 1) the collectives are no-ops and each
// call is one backend op (one kernel on a GPU).
//   LayerNorm: two all-reduces of [m] floats forward (row sums, centered squares), one of
//              [m, 2] backward; mean and rstd (m) saved for backward; beta optional.
//   RMSNorm:   one all-reduce of [m] forward (squares), one of [m] backward; rstd saved, no
//              mean (pass null), no beta.
#include <cstdint>

#include "comm/communicator.hpp"
#include "layout/layout_inputs.hpp"
#include "trainer/backend.hpp"

namespace axonn {

class RowNorm {
 public:
  RowNorm(Norm kind, double eps) : kind_(kind), eps_(static_cast<float>(eps)) {}

  // Whether the layer saves a mean for backward (LayerNorm).
  bool keeps_mean() const { return kind_ == Norm::layernorm; }

  // out (m, c) = norm(x); mean (LayerNorm only) and rstd (m) are saved for backward.
  void forward(Backend& backend, Communicator& cols, ActPtr out, float* mean, float* rstd, ConstActPtr x,
               const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C) const;
  // The same on x = a + b, the residual add fused into the first stage: x (m, c) is written
  // (and kept: it is the residual stream) and may alias a or b.
  void residual_forward(Backend& backend, Communicator& cols, ActPtr x, ActPtr out, float* mean, float* rstd,
                        ConstActPtr a, ConstActPtr b, const float* gamma, const float* beta, int64_t m, int64_t c,
                        int64_t C) const;
  // dx (m, c) += the input gradient; dgamma, dbeta (c) += theirs (dbeta null without beta).
  // partials: (m, 2) scratch.
  void backward(Backend& backend, Communicator& cols, ActPtr dx, float* dgamma, float* dbeta, float* partials,
                ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd, const float* gamma, int64_t m,
                int64_t c, int64_t C) const;

 private:
  // LayerNorm's stages 2 and 3 once `mean` holds this rank's row sums (mean holds the sums
  // until stage 2 turns them into means; rstd the centered squares until stage 3 turns them
  // into 1/std), or RMSNorm's stage 2 once `rstd` holds the squares.
  void finish_forward(Backend& backend, Communicator& cols, ActPtr out, float* mean, float* rstd, ConstActPtr x,
                      const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C) const;

  Norm kind_;
  float eps_;
};

}  // namespace axonn
