#pragma once
// The gradient reductions of a step over data, in buckets, so that they can run beside the
// backward of the last micro-batch (training.overlap_comm; AxoNN's overlap of the data
// all-reduce). Over data, in this order:
//   block L-1, ..., block 0: one block's four sharded weights (adjacent in the flat buffer,
//     parameters.hpp), final as soon as that block's backward is done (block_done);
//   then, at finish(): the wte shard (final after the embedding's backward, the last op) and
//     the small tensors (after their z all-reduce: their tokens are split over z).
// Each bucket is all-reduced, or, with the optimizer sharded (ParameterStore::sharded),
// reduce-scattered in place: data rank d receives the sum of its piece of the bucket (the
// piece its AdamW state covers) and the rest of the bucket's gradients is left undefined.
// With overlap a block's bucket is started in block_done and runs while the blocks below
// compute; without, finish() reduces it, in the same order, so both give the same bits.
// layout_volume.hpp predicts these L + 2 data collectives.
#include <cstdint>
#include <vector>

#include "comm/comm_grid.hpp"
#include "trainer/model/parameter_store.hpp"

namespace axonn {

class GradientSync {
 public:
  GradientSync(CommGrid& grid, ParameterStore& params, int layers, bool overlap);

  bool overlaps() const { return overlap_; }
  // Block `layer`'s weight gradients are final for this step: with overlap, start their
  // reduction over data. The grads must not change again until finish().
  void block_done(int layer);
  // Every gradient summed over z (the small ones) and data when it returns: all of them, or
  // with the optimizer sharded this rank's piece of every bucket.
  void finish();

 private:
  // Over data: the all-reduce of bucket b, or its reduce-scatter when sharded.
  void reduce(const ParamBucket& b);
  Communicator::Ticket start_reduce(const ParamBucket& b);

  CommGrid& grid_;
  ParameterStore& params_;
  bool overlap_;
  std::vector<const ParamBucket*> blocks_;  // [L], block l's sharded weights
  const ParamBucket* wte_;
  const ParamBucket* small_;
  std::vector<bool> started_;  // [L], this step
  Communicator::Ticket last_started_ = 0;
};

}  // namespace axonn
