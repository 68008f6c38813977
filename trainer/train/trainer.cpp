#include "trainer/train/trainer.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

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

Trainer::Trainer(Backend& backend, CommGrid& grid, const JobConfig& job, const DataMixture& data,
                 InitialWeights initial)
    : backend_(backend),
      grid_(grid),
      job_(job),
      data_(data),
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
      eval_sums_(backend, 2) {
  cursor_ = data_.start();
  if (data_.seed() != job.training.seed) data_.reseed(job.training.seed);
  if (initial == InitialWeights::drawn)
    draw_initial_weights();
  else
    params_.zero();
}

void Trainer::draw_initial_weights() { params_.initialize(job_.training.seed); }

Trainer::~Trainer() = default;

double Trainer::learning_rate_of(int64_t step) const { return learning_rate(job_.training, step); }

void Trainer::set_position(int64_t step, const MixtureCursor& cursor, uint64_t sample_seed) {
  if (cursor.taken.size() != static_cast<size_t>(data_.source_count()))
    throw std::invalid_argument("Trainer::set_position: a cursor of " + std::to_string(cursor.taken.size()) +
                                " sources for data of " + std::to_string(data_.source_count()));
  step_ = step;
  cursor_ = cursor;
  if (sample_seed != data_.seed()) data_.reseed(sample_seed);
}

// This rank's samples of a global batch: sequences [j·b, (j+1)·b) of it (trainer.hpp).
const SampleRef* Trainer::rank_samples(const std::vector<SampleRef>& batch) const {
  const Coords& at = grid_.coords();
  const int64_t coordinate = int64_t{at.data} * grid_.layout().z + at.z;
  return batch.data() + coordinate * split_.sequences_per_rank;
}

void Trainer::read_micro_batch(const DataMixture& data, const SampleRef* samples) {
  data.read(samples, split_.micro_batch, host_inputs_.data(), host_targets_.data());
  inputs_.upload(host_inputs_);
  targets_.upload(host_targets_);
}

StepReport Trainer::train_step(bool stop_requested, float busy_s) {
  MixtureCursor next = cursor_;
  const std::vector<SampleRef> batch = data_.take(next, job_.training.global_batch);
  const SampleRef* mine = rank_samples(batch);
  const int64_t global_tokens = int64_t{job_.training.global_batch} * job_.model.sequence;
  const float loss_scale = 1.0f / static_cast<float>(global_tokens);

  params_.zero_grads();
  model_.reset_moe_statistics();
  backend_.memset_zero(loss_sum_.data(), sizeof(float));
  for (int i = 0; i < split_.accumulation; ++i) {
    const int64_t offset = int64_t{i} * split_.micro_batch;
    {
      const int64_t first = cursor_.next + (mine - batch.data()) + offset;
      const TraceSpan span(trace_, "phase", "data", {{"first_sample", std::to_string(first)}});
      read_micro_batch(data_, mine + offset);
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
  cursor_ = std::move(next);
  return report;
}

double Trainer::evaluate(const DataMixture& held_out, int batches) {
  // The loss is counted where the optimizer counts it: once per (data, z) coordinate, on its
  // x = y = 0 rank; then summed over the world with the token count.
  const bool counts = grid_.coords().x == 0 && grid_.coords().y == 0;
  MixtureCursor cursor = held_out.start();
  backend_.memset_zero(loss_sum_.data(), sizeof(float));
  double tokens = 0;
  for (int b = 0; b < batches; ++b) {
    const std::vector<SampleRef> batch = held_out.take(cursor, job_.training.global_batch);
    const SampleRef* mine = rank_samples(batch);
    for (int i = 0; i < split_.accumulation; ++i) {
      read_micro_batch(held_out, mine + int64_t{i} * split_.micro_batch);
      model_.evaluate(inputs_.data(), targets_.data(), loss_sum_.data());
      tokens += static_cast<double>(split_.tokens);
    }
  }
  backend_.memset_zero(eval_sums_.data(), 2 * sizeof(float));
  if (counts) {
    backend_.copy(eval_sums_.data(), loss_sum_.data(), sizeof(float));
    const float counted = static_cast<float>(tokens);
    backend_.copy_to_device(eval_sums_.data() + 1, &counted, sizeof(float));
  }
  grid_.world().all_reduce(eval_sums_.data(), 2, ElementType::float32);
  grid_.world().synchronize();
  const std::vector<float> totals = eval_sums_.download();
  return totals[1] > 0 ? static_cast<double>(totals[0]) / totals[1] : 0.0;
}

}  // namespace axonn
