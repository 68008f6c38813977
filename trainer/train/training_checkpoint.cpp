#include "trainer/train/training_checkpoint.hpp"

#include <chrono>
#include <cstring>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/reader.hpp"
#include "checkpoint/step_dir.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// The sample order is keyed by the seed alone (SampleOrder is stateless), so the seed is the
// whole RNG state: 8 bytes, little-endian.
std::vector<uint8_t> seed_bytes(uint64_t seed) {
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(seed >> (8 * i));
  return bytes;
}

uint64_t seed_from_bytes(const std::vector<uint8_t>& bytes, uint64_t fallback) {
  if (bytes.size() != 8) return fallback;
  uint64_t seed = 0;
  for (int i = 0; i < 8; ++i) seed |= uint64_t{bytes[static_cast<size_t>(i)]} << (8 * i);
  return seed;
}

}  // namespace

std::string model_config_text(const ModelShape& m) {
  return "layers=" + std::to_string(m.layers) + " hidden=" + std::to_string(m.hidden) +
         " heads=" + std::to_string(m.heads) + " vocab=" + std::to_string(m.vocab) +
         " sequence=" + std::to_string(m.sequence);
}

int64_t checkpoint_payload_bytes(const ModelShape& model) {
  return 3 * parameters_total(model) * static_cast<int64_t>(sizeof(float));
}

TrainingCheckpoint::TrainingCheckpoint(std::filesystem::path dir, Trainer& trainer, int rank, SaverOptions options)
    : dir_(std::move(dir)), trainer_(trainer), rank_(rank), saver_(dir_, rank, std::move(options)) {}

std::vector<TrainingCheckpoint::Entry> TrainingCheckpoint::entries() {
  ParameterStore& p = trainer_.params();
  std::vector<Entry> out;
  const struct {
    const char* prefix;
    float* base;
  } buffers[] = {{"", p.params()}, {"adam.m/", p.adam_m()}, {"adam.v/", p.adam_v()}};
  for (const auto& b : buffers)
    for (const auto& slot : p.layout().slots) out.push_back({b.prefix + slot.spec.name, &slot, b.base + slot.offset});
  return out;
}

bool TrainingCheckpoint::writes(size_t entry_index, const ParamSlot& slot) const {
  const Layout& layout = trainer_.grid().layout();
  const Coords& at = trainer_.grid().coords();
  int64_t copies = 1, replica = 0;
  for (Axis a : replica_axes(slot.spec)) {
    replica = replica * layout.size(a) + at[a];
    copies *= layout.size(a);
  }
  return static_cast<int64_t>(entry_index) % copies == replica;
}

int64_t TrainingCheckpoint::staged_bytes() {
  const std::vector<Entry> all = entries();
  int64_t bytes = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (writes(i, *all[i].slot)) bytes += all[i].slot->count * static_cast<int64_t>(sizeof(float));
  return bytes;
}

std::chrono::nanoseconds TrainingCheckpoint::save(double last_lr) {
  const auto start = std::chrono::steady_clock::now();
  Backend& backend = trainer_.backend();
  ParameterStore& p = trainer_.params();
  std::vector<Entry> all = entries();
  // On a GPU the state is first copied to host memory; on the CPU backend the saver copies
  // straight from the trainer's buffers.
  if (!backend.device_is_host()) {
    const size_t n = static_cast<size_t>(p.size());
    staging_.resize(3 * n);
    backend.copy_to_host(staging_.data(), p.params(), n * sizeof(float));
    backend.copy_to_host(staging_.data() + n, p.adam_m(), n * sizeof(float));
    backend.copy_to_host(staging_.data() + 2 * n, p.adam_v(), n * sizeof(float));
  }
  std::vector<TensorSlice> slices;
  for (size_t i = 0; i < all.size(); ++i) {
    const Entry& e = all[i];
    if (!writes(i, *e.slot)) continue;
    const float* data = e.device;
    if (!backend.device_is_host()) {
      const size_t buffer = i / p.layout().slots.size();
      data = staging_.data() + buffer * static_cast<size_t>(p.size()) + static_cast<size_t>(e.slot->offset);
    }
    slices.push_back({e.name, e.slot->spec.shape, e.slot->rect, data});
  }

  std::optional<CommitSpec> commit;
  if (rank_ == 0) {
    CommitSpec spec;
    for (int r = 0; r < trainer_.grid().layout().world(); ++r) spec.expected_ranks.push_back(r);
    Metadata& md = spec.metadata;
    md.layout = format_layout_with_order(trainer_.grid().layout());
    md.model_config = model_config_text(trainer_.job().model);
    md.data_cursor = trainer_.data_cursor();
    md.rng_state = seed_bytes(trainer_.sample_seed());
    md.ints["step"] = trainer_.step();
    md.ints["training.global_batch"] = trainer_.job().training.global_batch;
    md.ints["training.steps"] = trainer_.job().training.steps;
    md.reals["training.last_lr"] = last_lr;
    md.strings["job"] = trainer_.job().source;
    spec.protected_steps = protected_steps_;
    commit = std::move(spec);
  }
  saver_.save(trainer_.step(), slices, std::move(commit));
  return std::chrono::steady_clock::now() - start;
}

const std::vector<int64_t>& TrainingCheckpoint::protect_steps_after(int64_t start_step) {
  protected_steps_.clear();
  for (int64_t s : committed_steps(dir_))
    if (s > start_step) protected_steps_.push_back(s);
  return protected_steps_;
}

void TrainingCheckpoint::wait() { saver_.wait(); }

void TrainingCheckpoint::poll() { saver_.poll(); }

std::optional<LoadResult> TrainingCheckpoint::load(bool fallback, std::optional<int64_t> step) {
  if (!std::filesystem::exists(dir_ / "latest") && !step) return std::nullopt;
  Backend& backend = trainer_.backend();
  ParameterStore& p = trainer_.params();
  std::vector<Entry> all = entries();
  const size_t n = static_cast<size_t>(p.size());
  if (!backend.device_is_host()) staging_.resize(3 * n);
  std::vector<SliceRead> reads;
  for (size_t i = 0; i < all.size(); ++i) {
    const Entry& e = all[i];
    float* dst = e.device;
    if (!backend.device_is_host())
      dst = staging_.data() + (i / p.layout().slots.size()) * n + static_cast<size_t>(e.slot->offset);
    reads.push_back({e.name, e.slot->spec.shape, e.slot->rect, dst});
  }
  LoadOptions options;
  options.fallback = fallback;
  options.step = step;
  // The model is checked first, by its config: heads or sequence changes that keep every
  // tensor's shape would otherwise load silently.
  options.check = [want = model_config_text(trainer_.job().model)](const CheckpointReader& reader) {
    if (reader.metadata().model_config != want)
      throw RequestMismatch(reader.step_dir().string(), "resume",
                            "the checkpoint in " + reader.step_dir().string() + " is of another model (" +
                                reader.metadata().model_config + ") than the job's [model] (" + want +
                                "); resume with the same [model] section or use a new checkpoint.dir");
  };
  LoadResult result = load_checkpoint(dir_, reads, options);
  if (!backend.device_is_host()) {
    backend.copy_to_device(p.params(), staging_.data(), n * sizeof(float));
    backend.copy_to_device(p.adam_m(), staging_.data() + n, n * sizeof(float));
    backend.copy_to_device(p.adam_v(), staging_.data() + 2 * n, n * sizeof(float));
  }
  p.zero_grads();
  const auto saved_step = result.metadata.ints.find("step");
  if (saved_step == result.metadata.ints.end() || saved_step->second != result.step)
    throw FormatError(result.step_dir.string(), "resume",
                      "the checkpoint's metadata does not record step " + std::to_string(result.step) +
                          " (meta.int.step); it was not written by axonn train");
  trainer_.set_position(result.step, result.metadata.data_cursor,
                        seed_from_bytes(result.metadata.rng_state, trainer_.sample_seed()));
  return result;
}

}  // namespace axonn
