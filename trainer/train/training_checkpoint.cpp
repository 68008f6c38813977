#include "trainer/train/training_checkpoint.hpp"

#include <charconv>
#include <cmath>
#include <chrono>
#include <cstring>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/reader.hpp"
#include "checkpoint/step_dir.hpp"
#include "layout/model_plan.hpp"
#include "trainer/train/data_position.hpp"

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

namespace {

// The shortest text that reads back as the same double ("1e-05"); a whole number as one
// ("500000", where to_chars' shortest would write "5e+05").
std::string shortest(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

}  // namespace

std::string model_config_text(const ModelShape& m) {
  std::string text = "layers=" + std::to_string(m.layers) + " hidden=" + std::to_string(m.hidden) +
                     " heads=" + std::to_string(m.heads) + " vocab=" + std::to_string(m.vocab) +
                     " sequence=" + std::to_string(m.sequence);
  // The architecture's keys where they differ from GPT-2's, so a GPT-2's text is what it always was.
  const ModelShape gpt2;
  auto add = [&](const char* key, const std::string& value) {
    text += ' ';
    text += key;
    text += '=';
    text += value;
  };
  if (m.norm != gpt2.norm) add("norm", norm_name(m.norm));
  if (m.norm_eps != gpt2.norm_eps) add("norm_eps", shortest(m.norm_eps));
  if (m.mlp != gpt2.mlp) add("mlp", mlp_name(m.mlp));
  if (m.ffn() != 4 * int64_t{m.hidden}) add("mlp_hidden", std::to_string(m.ffn()));
  if (m.positions != gpt2.positions) add("positions", positions_name(m.positions));
  if (m.positions == Positions::rope) add("rope_theta", shortest(m.rope_theta));
  if (m.rope_scaling) {
    const RopeScaling& r = *m.rope_scaling;
    add("rope_scaling", "llama3:" + shortest(r.factor) + ":" + shortest(r.low_freq_factor) + ":" +
                            shortest(r.high_freq_factor) + ":" + std::to_string(r.original_positions));
  }
  if (m.kv() != m.heads) add("kv_heads", std::to_string(m.kv()));
  if (m.bias != gpt2.bias) add("bias", m.bias ? "true" : "false");
  if (m.tie_embeddings != gpt2.tie_embeddings) add("tie_embeddings", m.tie_embeddings ? "true" : "false");
  if (m.moe()) {  // a dense model's text has none of these
    add("experts", std::to_string(m.experts));
    add("top_k", std::to_string(m.top_k));
    add("moe_every", std::to_string(m.moe_every));
  }
  return text;
}

int64_t checkpoint_payload_bytes(const ModelShape& model) {
  return 3 * parameters_total(model) * static_cast<int64_t>(sizeof(float));
}

TrainingCheckpoint::TrainingCheckpoint(std::filesystem::path dir, Trainer& trainer, int rank, SaverOptions options)
    : dir_(std::move(dir)),
      trainer_(trainer),
      rank_(rank),
      saver_(dir_, rank, std::move(options)),
      slices_(
          state_slices(trainer.params().layout(), trainer.params().state_runs(), trainer.params().master_sharded())),
      load_slices_(state_slices(trainer.params().layout(), trainer.params().state_runs())) {}

float* TrainingCheckpoint::device_data(const StateSlice& s) {
  ParameterStore& p = trainer_.params();
  switch (s.buffer) {
    case StateBuffer::params:
      return p.params_at(s.offset);
    case StateBuffer::adam_m:
      return p.adam_m() + s.offset;
    case StateBuffer::adam_v:
      return p.adam_v() + s.offset;
    case StateBuffer::master:
      return p.master() + s.offset;
  }
  return nullptr;
}

float* TrainingCheckpoint::staged_data(const StateSlice& s) {
  const ParameterStore& p = trainer_.params();
  const size_t n = static_cast<size_t>(p.size()), state = static_cast<size_t>(p.state_size());
  const size_t base[] = {0, n, n + state, n + 2 * state};  // params | adam_m | adam_v | master
  return staging_.data() + base[static_cast<size_t>(s.buffer)] + static_cast<size_t>(s.offset);
}

bool TrainingCheckpoint::writes(size_t index, const StateSlice& slice) const {
  const Layout& layout = trainer_.grid().layout();
  const Coords& at = trainer_.grid().coords();
  int64_t copies = 1, replica = 0;
  for (Axis a : replica_axes(slice.slot->spec)) {
    if (optimizer_pieces_over(a) && slice.split_over_data) continue;
    replica = replica * layout.size(a) + layout.coordinate(at, a);
    copies *= layout.size(a);
  }
  return static_cast<int64_t>(index) % copies == replica;
}

int64_t TrainingCheckpoint::staged_bytes() {
  int64_t bytes = 0;
  for (size_t i = 0; i < slices_.size(); ++i)
    if (writes(i, slices_[i])) bytes += element_count(slices_[i].rect) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

std::chrono::nanoseconds TrainingCheckpoint::save(double last_lr) {
  const auto start = std::chrono::steady_clock::now();
  Backend& backend = trainer_.backend();
  ParameterStore& p = trainer_.params();
  // On a GPU the state is first copied to host memory; on the CPU backend the saver copies
  // straight from the trainer's buffers.
  if (!backend.device_is_host()) {
    const size_t n = static_cast<size_t>(p.size()), state = static_cast<size_t>(p.state_size());
    const size_t master = static_cast<size_t>(p.master_size());
    staging_.resize(n + 2 * state + master);
    // The float32 parameters: all of them, or under a sharded master the small tensors.
    const size_t first = p.master_sharded() ? static_cast<size_t>(p.layout().sharded) : 0;
    backend.copy_to_host(staging_.data() + first, p.params_at(static_cast<int64_t>(first)),
                         (n - first) * sizeof(float));
    backend.copy_to_host(staging_.data() + n, p.adam_m(), state * sizeof(float));
    backend.copy_to_host(staging_.data() + n + state, p.adam_v(), state * sizeof(float));
    backend.copy_to_host(staging_.data() + n + 2 * state, p.master(), master * sizeof(float));
  }
  std::vector<TensorSlice> slices;
  for (size_t i = 0; i < slices_.size(); ++i) {
    const StateSlice& s = slices_[i];
    if (!writes(i, s)) continue;
    slices.push_back({s.name, s.slot->spec.shape, s.rect, backend.device_is_host() ? device_data(s) : staged_data(s)});
  }

  std::optional<CommitSpec> commit;
  if (rank_ == 0) {
    CommitSpec spec;
    for (int r = 0; r < trainer_.grid().layout().world(); ++r) spec.expected_ranks.push_back(r);
    Metadata& md = spec.metadata;
    md.layout = format_layout_with_order(trainer_.grid().layout());
    md.model_config = model_config_text(trainer_.job().model);
    write_data_position(md, trainer_.data(), trainer_.mixture_cursor());
    md.rng_state = seed_bytes(trainer_.sample_seed());
    md.ints["step"] = trainer_.step();
    md.ints["training.global_batch"] = trainer_.job().training.global_batch;
    md.ints["training.steps"] = trainer_.job().training.steps;
    // How the state was held (a resume reads the same tensors in either mode).
    md.ints["training.shard_optimizer"] = trainer_.params().sharded() ? 1 : 0;
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

bool TrainingCheckpoint::poll() { return saver_.poll(); }

std::optional<LoadResult> TrainingCheckpoint::load(bool fallback, std::optional<int64_t> step) {
  if (!std::filesystem::exists(dir_ / "latest") && !step) return std::nullopt;
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
  // A checkpoint `axonn ckpt import-hf` wrote holds the parameters only: AdamW's moments start
  // at zero, as in any run's first step.
  options.may_lack = [](const CheckpointReader& reader, const SliceRead& slice) {
    return reader.metadata().strings.count(kImportedFrom) > 0 &&
           (slice.name.rfind("adam.m/", 0) == 0 || slice.name.rfind("adam.v/", 0) == 0);
  };
  return load_from([&](std::span<const SliceRead> reads) { return load_checkpoint(dir_, reads, options); });
}

LoadResult TrainingCheckpoint::load_from(const FillSlices& fill) {
  Backend& backend = trainer_.backend();
  ParameterStore& p = trainer_.params();
  const size_t n = static_cast<size_t>(p.size()), state = static_cast<size_t>(p.state_size());
  if (!backend.device_is_host()) staging_.assign(n + 2 * state, 0.0f);  // the padding stays zero
  // Every parameter whole (a sharded master takes its pieces from them), the moments as held.
  std::vector<SliceRead> reads;
  for (const StateSlice& s : load_slices_)
    reads.push_back({s.name, s.slot->spec.shape, s.rect, backend.device_is_host() ? device_data(s) : staged_data(s)});
  LoadResult result = fill(reads);
  if (!result.absent.empty() && backend.device_is_host()) {
    backend.memset_zero(p.adam_m(), state * sizeof(float));
    backend.memset_zero(p.adam_v(), state * sizeof(float));
  }
  if (!backend.device_is_host()) {
    p.set_params(staging_.data());
    backend.copy_to_device(p.adam_m(), staging_.data() + n, state * sizeof(float));
    backend.copy_to_device(p.adam_v(), staging_.data() + n + state, state * sizeof(float));
    backend.synchronize();
  }
  p.zero_grads();
  const auto saved_step = result.metadata.ints.find("step");
  if (saved_step == result.metadata.ints.end() || saved_step->second != result.step)
    throw FormatError(result.step_dir.string(), "resume",
                      "the checkpoint's metadata does not record step " + std::to_string(result.step) +
                          " (meta.int.step); it was not written by axonn train");
  DataPosition position =
      read_data_position(result.metadata, trainer_.data(), data_changed_, result.step_dir.string());
  data_change_ = std::move(position.changed);
  trainer_.set_position(result.step, position.cursor, seed_from_bytes(result.metadata.rng_state, trainer_.sample_seed()));
  return result;
}

}  // namespace axonn
