#pragma once
// The vocab-parallel softmax cross-entropy over y: the backend's staged ops with their
// collectives in between (docs/parallel-plan.md, "Everything else"); with one vocab rank the
// plain op. The normalization layers' stages are row_norm.hpp's.
#include <cstdint>

#include "comm/communicator.hpp"
#include "trainer/backend.hpp"

namespace axonn {

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
