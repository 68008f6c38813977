#pragma once
// The gradient all-reduces of a step, in buckets, so that the data-parallel one can run
// beside the backward of the last micro-batch (training.overlap_comm; AxoNN's overlap of
// the data all-reduce). Over data, in this order:
//   block L-1, ..., block 0: one block's four sharded weights (adjacent in the flat buffer,
//     parameters.hpp), final as soon as that block's backward is done (block_done);
//   then, at finish(): the wte shard (final after the embedding's backward, the last op) and
//     the small tensors (after their z all-reduce: their tokens are split over z).
// With overlap a block's bucket is started in block_done and runs while the blocks below
// compute; without, finish() all-reduces it, in the same order, so both give the same bits.
// layout_volume.hpp predicts these L + 2 data all-reduces.
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
  // all-reduce over data. The grads must not change again until finish().
  void block_done(int layer);
  // Every gradient summed over z (the small ones) and data when it returns.
  void finish();

 private:
  struct Range {
    int64_t offset = 0, count = 0;
  };
  void all_reduce_over_data(const Range& r);

  CommGrid& grid_;
  ParameterStore& params_;
  bool overlap_;
  std::vector<Range> blocks_;  // [L], block l's sharded weights
  Range wte_, small_;
  std::vector<bool> started_;  // [L], this step
  Communicator::Ticket last_started_ = 0;
};

}  // namespace axonn
