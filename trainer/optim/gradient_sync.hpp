#pragma once
// The gradient reductions of a step over data, in buckets, so that they can run beside the
// backward of the last micro-batch (training.overlap_comm; AxoNN's overlap of the data
// all-reduce). In this order:
//   block L-1, ..., block 0: one block's sharded weights (adjacent in the flat buffer,
//     parameters.hpp), final as soon as that block's backward is done (block_done); an MoE
//     block's are two buckets, its attention weights and its experts' weights;
//   then, at finish(): the wte shard (final after the embedding's backward, the last op) and
//     the small tensors, then the experts' biases (both after their z all-reduce: their
//     tokens are split over z).
// The experts' buckets are summed over the ranks that hold the same experts: the
// expert_data cut of the data axis under expert parallelism (E_p > 1), else data; every
// other bucket over data.
// Each bucket is all-reduced, or, with the optimizer sharded (ParameterStore::sharded),
// reduce-scattered in place: data rank d receives the sum of its piece of the bucket (the
// piece its AdamW state covers) and the rest of the bucket's gradients is left undefined.
// With overlap a block's buckets are started in block_done and run while the blocks below
// compute; without, finish() reduces them, in the same order, so both give the same bits.
// layout_volume.hpp predicts these collectives.
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
  // reduction. The grads must not change again until finish().
  void block_done(int layer);
  // Every gradient summed over z (the small ones) and data (or expert_data) when it returns:
  // all of them, or with the optimizer sharded this rank's piece of every bucket.
  void finish();

  // The axis bucket `b` is summed over: expert_data for an experts' bucket under expert
  // parallelism, else data.
  CommAxis axis_of(const ParamBucket& b) const;

 private:
  // The all-reduce of bucket b over its axis, or its reduce-scatter when sharded.
  void reduce(const ParamBucket& b);
  Communicator::Ticket start_reduce(const ParamBucket& b);

  CommGrid& grid_;
  ParameterStore& params_;
  bool overlap_;
  std::vector<std::vector<const ParamBucket*>> blocks_;  // [L]: block l's weight buckets
  const ParamBucket* wte_;
  const ParamBucket* small_;
  const ParamBucket* expert_small_ = nullptr;  // MoE models only
  std::vector<bool> started_;                  // [L], this step
  // The last collective started on each axis this step (CommAxis index), finished first.
  std::vector<Communicator::Ticket> last_started_ = std::vector<Communicator::Ticket>(kCommAxisCount, 0);
};

}  // namespace axonn
