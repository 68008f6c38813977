#include "trainer/train/trainer.hpp"

#include <optional>
#include <string>

#include "config/config_error.hpp"
#include "trainer/optim/lr_schedule.hpp"
#include "trainer/train/trace_ops.hpp"

namespace axonn {
namespace {

BatchShape batch_shape(const TrainingConfig& t) { return {t.global_batch, t.micro_batch, t.dtype, t.tp_chunks}; }

// A training setting that "auto" leaves to the layout model (`how`: which decision and where),
// as run_training decided it; ConfigError where it reached the trainer undecided.
template <typename T>
T decided(const std::optional<T>& setting, const char* key, const char* how) {
  if (!setting)
    throw ConfigError(std::string(key) + " = \"auto\" reached the trainer undecided: the layout model " + how +
                      "; decide it before making a Trainer, as run_training does");
  return *setting;
}

Recompute recompute_mode(const TrainingConfig& t) {
  return decided(t.recompute, "training.recompute", "picks the mode per layout (resolved_modes)");
}

// The model as the layers build it: model.moe_chunks decided (MoeShape::rounds).
const ModelShape& decided_model(const ModelShape& m) {
  if (m.moe() && m.moe_chunks_auto())
    throw ConfigError(
        "model.moe_chunks = \"auto\" reached the trainer undecided: the layout model picks the rounds per layout "
        "(resolved_moe_chunks); decide them before making a Trainer, as run_training does");
  return m;
}

bool overlap_mode(const TrainingConfig& t) {
  return decided(t.overlap_comm, "training.overlap_comm", "decides it per layout (overlaps_comm)");
}

bool shard_mode(const TrainingConfig& t) {
  return decided(t.shard_optimizer, "training.shard_optimizer", "decides it per layout (resolved_modes)");
}

}  // namespace

Trainer::Trainer(Backend& backend, CommGrid& grid, const JobConfig& job, const TokenData& data)
    : backend_(backend),
      grid_(grid),
      job_(job),
      data_(data),
      order_(job.training.seed, data.size(), job.model.sequence),
      split_(batch_split(job.model, batch_shape(job.training), grid.layout())),
      params_(backend, job.model, grid.layout(), grid.coords(), shard_mode(job.training)),
      model_(backend, grid, decided_model(job.model), split_.micro_batch, params_, overlap_mode(job.training),
             recompute_mode(job.training), decided_tp_chunks(batch_shape(job.training))),
      sync_(grid, params_, job.model.layers, overlap_mode(job.training)),
      optimizer_(backend, grid, params_, sync_, job.training),
      host_inputs_(static_cast<size_t>(split_.tokens)),
      host_targets_(static_cast<size_t>(split_.tokens)),
      inputs_(backend, static_cast<size_t>(split_.tokens)),
      targets_(backend, static_cast<size_t>(split_.tokens)),
      loss_sum_(backend, 1),
      sample_seed_(job.training.seed) {
  params_.initialize(job.training.seed);
}

Trainer::~Trainer() = default;

double Trainer::learning_rate_of(int64_t step) const { return learning_rate(job_.training, step); }

void Trainer::set_position(int64_t step, int64_t data_cursor, uint64_t sample_seed) {
  step_ = step;
  cursor_ = data_cursor;
  if (sample_seed != sample_seed_) order_ = SampleOrder(sample_seed, data_.size(), job_.model.sequence);
  sample_seed_ = sample_seed;
}

StepReport Trainer::train_step(bool stop_requested, float busy_s) {
  const Coords& at = grid_.coords();
  const int64_t coordinate = int64_t{at.data} * grid_.layout().z + at.z;
  const int64_t global_tokens = int64_t{job_.training.global_batch} * job_.model.sequence;
  const float loss_scale = 1.0f / static_cast<float>(global_tokens);

  params_.zero_grads();
  model_.reset_moe_statistics();
  backend_.memset_zero(loss_sum_.data(), sizeof(float));
  for (int i = 0; i < split_.accumulation; ++i) {
    const int64_t first = cursor_ + coordinate * split_.sequences_per_rank + int64_t{i} * split_.micro_batch;
    {
      const TraceSpan span(trace_, "phase", "data", {{"first_sample", std::to_string(first)}});
      read_samples(data_, order_, first, split_.micro_batch, job_.model.sequence, host_inputs_.data(),
                   host_targets_.data());
      inputs_.upload(host_inputs_);
      targets_.upload(host_targets_);
    }
    // The last micro-batch's backward hands each block's finished gradients to the sync.
    GradientSync* last = i + 1 == split_.accumulation ? &sync_ : nullptr;
    const TraceSpan span(trace_, "phase", "forward_backward", {{"micro_batch", std::to_string(i)}});
    model_.forward_backward(inputs_.data(), targets_.data(), loss_scale, loss_sum_.data(), last);
  }
  const double local_tokens = static_cast<double>(split_.accumulation * split_.tokens);
  const TraceSpan span(trace_, "phase", "optimizer");
  StepReport report =
      optimizer_.step(step_, learning_rate_of(step_), loss_sum_.data(), local_tokens, stop_requested, busy_s);
  if (const MoeStatistics moe = model_.moe_statistics(); moe.micro_batches > 0) {
    report.balance_loss = moe.balance_loss / split_.accumulation;
    report.dropped_fraction = moe.routed_pairs > 0 ? moe.dropped_pairs / moe.routed_pairs : 0;
    report.expert_load = moe.max_expert_load / static_cast<double>(moe.micro_batches);
  }
  ++step_;
  cursor_ += job_.training.global_batch;
  return report;
}

}  // namespace axonn
