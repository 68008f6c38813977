#pragma once
// The weight gradients' reduce-scatters over z (G_z > 1): a layer computes its full dW block
// [k/G_a, n/G_b] into block(), then add_to() sums it over z into its gradient shard
// [k/(G_a·G_z), n/G_b] (+=). With overlap (training.overlap_comm) add_to starts the
// reduce-scatter and returns; the next add_to finishes it, after that layer's GEMMs ran
// beside it, and adds it to its gradient; flush() finishes the one in flight (before a
// block's gradients are handed to the data all-reduce, and at the end of the backward).
// Without overlap add_to waits for it in place: the same collectives in the same order,
// the same bits.
//
// Two buffer pairs take turns, so one layer's dW is computed while the previous one's is
// reduce-scattered: pair 0 fits the largest dW of any layer (the tied LM head's), pair 1 the
// largest of the block layers; a dW that does not fit the next pair waits for pair 0.
#include <array>
#include <cstdint>
#include <optional>

#include "comm/communicator.hpp"
#include "trainer/backend.hpp"

namespace axonn {

class GradScatter {
 public:
  struct Pair {
    float* block = nullptr;  // >= capacity elements
    float* shard = nullptr;  // >= capacity / G_z elements
    int64_t capacity = 0;
  };

  GradScatter() = default;  // G_z = 1: never used
  GradScatter(Backend& backend, Communicator& z, Pair large, Pair small, bool overlap);

  // Where to compute a dW block of `elements`: the next free pair that fits.
  float* block(int64_t elements);
  // Sums `source` (z-major: G_z blocks of `shard` elements, the last block() or a layout of
  // it) over z and adds this rank's block to grad (shard elements).
  void add_to(float* grad, const float* source, int64_t shard);
  void flush();

 private:
  struct InFlight {
    float* grad;
    int64_t shard;
    int pair;
    Communicator::Ticket ticket;
  };

  Backend* backend_ = nullptr;
  Communicator* z_ = nullptr;
  std::array<Pair, 2> pairs_{};
  bool overlap_ = false;
  int next_ = 0;  // the pair block() hands out
  std::optional<InFlight> in_flight_;
};

}  // namespace axonn
