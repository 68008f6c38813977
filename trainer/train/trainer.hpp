#pragma once
// One rank's training state and its optimizer step. The global batch of step s is global
// samples [cursor, cursor + B) of the data's schedule (data/data_mixture.hpp); the (data, z)
// coordinate j = d·G_z + z
// takes sequences [j·b, (j+1)·b) of it, b = B / (G_data·G_z), in A micro-batches of mb, so
// every layout trains on the same samples and the loss is the mean over all B·T tokens.
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/comm_grid.hpp"
#include "config/job_config.hpp"
#include "core/trace_recorder.hpp"
#include "layout/model_plan.hpp"
#include "trainer/backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/optim/gradient_sync.hpp"
#include "trainer/optim/optimizer.hpp"

namespace axonn {

class Trainer {
 public:
  // Parameters start from the layout-independent init of training.seed, or with
  // InitialWeights::deferred at zero until a checkpoint's load or draw_initial_weights() sets
  // them. training.recompute and training.shard_optimizer must be decided: "auto" is decided
  // per layout by the layout model (resolved_modes, which run_training applies), so unset
  // either throws ConfigError.
  enum class InitialWeights { drawn, deferred };
  Trainer(Backend& backend, CommGrid& grid, const JobConfig& job, const DataMixture& data,
          InitialWeights initial = InitialWeights::drawn);
  ~Trainer();

  // Runs step step(): A forward/backward micro-batches and the optimizer; then step() and
  // data_cursor() advance. stop_requested: this rank's vote to stop at this boundary.
  // busy_s: this rank's busy seconds of its previous step, shared with the others
  // (StepReport::rank_busy_s).
  StepReport train_step(bool stop_requested = false, float busy_s = 0.0f);

  int64_t step() const { return step_; }                     // optimizer steps done
  int64_t data_cursor() const { return cursor_.next; }       // next global sample
  const MixtureCursor& mixture_cursor() const { return cursor_; }  // and the samples taken from each source
  const DataMixture& data() const { return data_; }
  uint64_t sample_seed() const { return data_.seed(); }
  double learning_rate_of(int64_t step) const;
  // The state the constructor's InitialWeights::drawn gives: the init of training.seed, zero
  // gradients and moments. For a run that loaded no checkpoint.
  void draw_initial_weights();
  // After a checkpoint load: continue at `step` from `cursor` of the sample orders keyed by
  // `sample_seed` (the saved run's, whatever the job file says now).
  void set_position(int64_t step, const MixtureCursor& cursor, uint64_t sample_seed);

  // The mean loss per token of `batches` global batches of `held_out` (its samples [0,
  // batches·B), the same ones at every call), split over the ranks as a training batch is;
  // forward only: no gradient, no optimizer state changes. Every rank calls it.
  double evaluate(const DataMixture& held_out, int batches);

  // Each step's phases (data, each micro-batch's forward and backward, the optimizer) become
  // spans of `trace` (nullptr: none).
  void trace_into(TraceRecorder* trace) { trace_ = trace; }

  Backend& backend() { return backend_; }
  CommGrid& grid() { return grid_; }
  ParameterStore& params() { return params_; }
  const BatchSplit& split() const { return split_; }
  const JobConfig& job() const { return job_; }

 private:
  const SampleRef* rank_samples(const std::vector<SampleRef>& batch) const;
  // One micro-batch of `data`'s samples into inputs_ and targets_.
  void read_micro_batch(const DataMixture& data, const SampleRef* samples);

  Backend& backend_;
  CommGrid& grid_;
  JobConfig job_;
  DataMixture data_;
  BatchSplit split_;
  ParameterStore params_;
  Gpt model_;
  GradientSync sync_;
  Optimizer optimizer_;
  int64_t step_ = 0;
  MixtureCursor cursor_;
  std::vector<int32_t> host_inputs_, host_targets_;
  DeviceBuffer<int32_t> inputs_, targets_;
  DeviceBuffer<float> loss_sum_;
  DeviceBuffer<float> eval_sums_;  // [loss sum, tokens] of an evaluation, summed over the world
  TraceRecorder* trace_ = nullptr;
};

}  // namespace axonn
