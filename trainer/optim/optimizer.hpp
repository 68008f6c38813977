#pragma once
// The end of an optimizer step, after the micro-batches have accumulated their gradients:
//   1-2. GradientSync::finish: the small tensors' gradients summed over z (their tokens are
//      split over z), every gradient over data (buckets, some already started during the
//      last backward: gradient_sync.hpp),
//   3. one all-reduce over the world of 4 floats: loss sum, token count, squared gradient
//      norm, stop requests (each value counted once: by the ranks at coordinate 0 of the
//      axes that replicate it),
//   4. clip by the global norm and apply AdamW (weight decay on the decayed prefix only).
// With the optimizer sharded over data (ParameterStore::sharded), step 2 is a reduce-scatter,
// the norm and AdamW cover this rank's piece of every bucket, and then:
//   5. the updated pieces are all-gathered over data, bucket by bucket (in place), each
//      started as soon as its AdamW is done when overlapping (training.overlap_comm): the
//      float32 weights, or under mixed precision (ParameterStore::master_sharded) the weight
//      buckets' bf16 copy, converted from the float32 master pieces AdamW updated.
// AdamW is elementwise, so with the same summed gradients and the same clip scale the
// updated weights are the unsharded run's bits; layout_volume.hpp predicts the collectives.
#include <cstdint>
#include <vector>

#include "comm/comm_grid.hpp"
#include "config/job_config.hpp"
#include "trainer/backend.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/optim/gradient_sync.hpp"

namespace axonn {

struct StepReport {
  double loss = 0;        // mean per token over the global batch
  double tokens = 0;      // tokens in the global batch
  double grad_norm = 0;   // global L2 norm before clipping
  double clip_scale = 1;  // min(1, grad_clip / (grad_norm + 1e-6)); 1 when clipping is off
  bool stop = false;      // some rank asked to stop at this step boundary
  // An MoE model's routing (trainer/model/moe_layer.hpp), the same on every rank; 0 when dense.
  double balance_loss = 0;      // Σ over MoE blocks of the micro-batches' mean balance loss
  double dropped_fraction = 0;  // routed (token, choice) pairs dropped by the capacity
  double expert_load = 0;       // max over mean tokens per expert, averaged over blocks and micro-batches
  // [world] each rank's busy seconds (outside blocking collectives) of its previous step, as
  // it passed them to step(): shared in the same all-reduce as the loss, for the straggler
  // watch (trainer/train/straggler_watch.hpp).
  std::vector<float> rank_busy_s;
};

class Optimizer {
 public:
  Optimizer(Backend& backend, CommGrid& grid, ParameterStore& params, GradientSync& sync,
            const TrainingConfig& training);

  // step: 0-based optimizer step (AdamW's bias correction uses step + 1). loss_sum: device
  // scalar, this rank's summed token losses; tokens: this rank's token count; busy_s: this
  // rank's busy seconds of its previous step (StepReport::rank_busy_s).
  StepReport step(int64_t step, double lr, const float* loss_sum, double tokens, bool stop_requested,
                  float busy_s = 0.0f);

 private:
  struct Run {
    int64_t offset, count;
  };
  Backend& backend_;
  CommGrid& grid_;
  ParameterStore& params_;
  GradientSync& sync_;
  TrainingConfig training_;
  // AdamW over one state run, with weight decay where it lies in the decayed prefix.
  void adamw(const AdamWStep& s, const StateRun& run);
  // Bucket b's updated weights all-gathered over data, in place (float32, or the bf16 copy
  // under a sharded master): started (overlap) or done.
  Communicator::Ticket gather_weights(const ParamBucket& b);

  std::vector<Run> norm_runs_;  // gradient ranges this rank adds to the global norm
  bool counts_loss_;            // x = y = 0: this rank's loss is not a copy of another's
  DeviceBuffer<float> stats_;   // [loss sum, tokens, squared norm, stop requests, busy seconds per rank]
  bool overlap_;
};

}  // namespace axonn
