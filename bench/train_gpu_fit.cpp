// bench_train_gpu --fit (train_gpu_fit.hpp).
#include "train_gpu_fit.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_stats.hpp"
#include "comm/comm_grid.hpp"
#include "solo_trainer.hpp"
#include "torch_side.hpp"
#include "trainer/cuda/cuda_backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/train/trainer.hpp"

namespace axonn::bench {
namespace {

// Which of the two searches: the micro-batch at the model's sequence, or the sequence at
// micro-batch 1.
enum class Axis { micro_batch, sequence };
const char* axis_name(Axis a) { return a == Axis::micro_batch ? "micro-batch" : "sequence"; }

// One candidate: the model at `value` on `axis`, with the chooser's recomputation for it.
struct Candidate {
  int value = 0;
  ModelShape shape;
  int micro_batch = 1;
  Recompute recompute = Recompute::none;
  double predicted_bytes = 0;  // estimate_memory(...).total() at that recomputation
};

// The doubling candidates from the model's own value (micro-batch 1, or its T) up to `max`.
std::vector<Candidate> candidates(const GpuModel& model, Axis axis, int max, double memory_bytes) {
  std::vector<Candidate> out;
  for (int64_t value = axis == Axis::micro_batch ? 1 : model.shape.sequence; value <= max; value *= 2) {
    Candidate c;
    c.value = static_cast<int>(value);
    c.shape = model.shape;
    if (axis == Axis::sequence) c.shape.sequence = c.value;
    c.micro_batch = axis == Axis::micro_batch ? c.value : 1;
    const MemoryEstimate predicted =  // at the modes the chooser resolves: recompute "auto"
        estimate_memory(one_gpu_input(c.shape, c.micro_batch, c.micro_batch, memory_bytes), Layout{});
    c.recompute = predicted.recompute;
    c.predicted_bytes = static_cast<double>(predicted.total());
    out.push_back(c);
  }
  return out;
}

// Tokens below `vocab` from a hash, enough for `samples` samples of `sequence` + 1.
std::shared_ptr<const TokenData> hashed_tokens(int vocab, int sequence, int samples) {
  std::vector<int32_t> tokens(static_cast<size_t>(samples) * static_cast<size_t>(sequence + 1));
  uint32_t x = 2463534242u;
  for (int32_t& t : tokens) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    t = static_cast<int32_t>(x % static_cast<uint32_t>(vocab));
  }
  return std::make_shared<const TokenData>(TokenData::from_tokens(std::move(tokens), "hashed tokens"));
}

// Whether one optimizer step of `c` runs on a backend of `options` made for it alone (what an
// earlier try left allocated, such as the backend's scratch, which only grows, does not count
// against it); *why gets the failure's message.
bool our_step_fits(const CudaBackendOptions& options, const Candidate& c, std::string* why) {
  try {
    const std::unique_ptr<Backend> owned = make_cuda_backend(options);
    Backend& backend = *owned;
    JobConfig job = bench_train_job("bench_train_gpu --fit", c.shape, c.micro_batch, c.micro_batch, c.recompute);
    job.training.dtype = ElementType::bfloat16;
    job.training.device = "cuda";
    const auto data = hashed_tokens(c.shape.vocab, c.shape.sequence, c.micro_batch);
    SoloExchange exchange;
    CommGrid grid(exchange, Layout{}, std::chrono::seconds(60), true, CommBackend::nccl);
    grid.order_with_compute(cuda_stream_of(backend));
    Trainer trainer(backend, grid, job, DataMixture::single(data, job.training.seed, job.model.sequence),
                    Trainer::InitialWeights::deferred);
    trainer.train_step();
    backend.synchronize();
    grid.synchronize();
    return true;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
}

// The largest fitting candidate's index on our side (-1: none), printing each try.
int our_largest(const CudaBackendOptions& options, Axis axis, const std::vector<Candidate>& cs) {
  int largest = -1;
  for (size_t i = 0; i < cs.size(); ++i) {
    std::string why;
    const auto start = Clock::now();
    const bool fits = our_step_fits(options, cs[i], &why);
    std::printf("  ours %s %d, recompute %s (predicted %.1f GiB): %s (%.1f s)%s%s\n", axis_name(axis), cs[i].value,
                recompute_name(cs[i].recompute), cs[i].predicted_bytes / (1 << 30), fits ? "fits" : "does not fit",
                seconds_since(start), fits ? "" : ": ", why.substr(0, 300).c_str());
    std::fflush(stdout);
    if (!fits) break;
    largest = static_cast<int>(i);
  }
  return largest;
}

// PyTorch's largest fitting candidate's index (-1: none): bench/train_gpu_fit_torch.py tries them
// in order in one process and prints the count that fit.
int torch_largest(const FitOptions& o, const GpuModel& model, Axis axis, const std::vector<Candidate>& cs) {
  std::string list;
  for (const Candidate& c : cs) {
    if (!list.empty()) list += ',';
    list += std::to_string(c.value);
    list += ':';
    list += recompute_name(c.recompute);
  }
  const std::string command =
      torch_command(o.python, "train_gpu_fit_torch.py",
                    torch_model_flags(model.shape, 1, 1) + " --axis " + axis_name(axis) + " --candidates " + list);
  const std::string output = run_torch_side(command, "fitting");
  // Its lines before the JSON, one per try, for the log.
  for (size_t line = 0, next; line < output.size(); line = next + 1) {
    next = output.find('\n', line);
    if (next == std::string::npos) next = output.size();
    if (output.compare(line, 8, "  torch ") == 0) std::printf("%s\n", output.substr(line, next - line).c_str());
  }
  return static_cast<int>(*json_number(output, "fitting")) - 1;
}

// "128 (block)", or "none" for no fitting candidate.
std::string describe(const std::vector<Candidate>& cs, int index) {
  if (index < 0) return "none";
  const Candidate& c = cs[static_cast<size_t>(index)];
  std::string out = std::to_string(c.value);
  out += " (";
  out += recompute_name(c.recompute);
  out += ')';
  return out;
}

}  // namespace

void run_fit(const CudaBackendOptions& backend, const CudaDeviceInfo& gpu, const FitOptions& o) {
  std::printf("GPU 0 (%s, %.1f GiB), bf16; one optimizer step per candidate, recomputation as the chooser picks it\n\n",
              gpu.name.c_str(), gpu.memory_bytes / (1 << 30));

  struct Row {
    std::string model;
    Axis axis;
    std::string ours, theirs;
    std::optional<double> ratio;
    bool capped = false;
  };
  std::vector<Row> rows;
  bool goal = true;
  for (const GpuModel& model : o.models) {
    for (const Axis axis : {Axis::micro_batch, Axis::sequence}) {
      const std::vector<Candidate> cs =
          candidates(model, axis, axis == Axis::micro_batch ? o.max_micro_batch : o.max_sequence, gpu.memory_bytes);
      if (cs.empty()) continue;
      std::printf("%s, %s:\n", model.name.c_str(), axis_name(axis));
      const int ours = our_largest(backend, axis, cs);
      Row row{model.name, axis, describe(cs, ours), "-", std::nullopt, ours + 1 == static_cast<int>(cs.size())};
      if (o.torch) {
        const int theirs = torch_largest(o, model, axis, cs);
        row.theirs = describe(cs, theirs);
        if (ours >= 0 && theirs >= 0)
          row.ratio = static_cast<double>(cs[static_cast<size_t>(ours)].value) / cs[static_cast<size_t>(theirs)].value;
        goal = goal && ours >= theirs;
      }
      rows.push_back(row);
    }
  }

  std::printf("\n%10s %12s %18s %18s %11s\n", "model", "largest", "ours (recompute)", "torch (recompute)",
              "ours/torch");
  for (const Row& r : rows) {
    char ratio[16] = "-";
    if (r.ratio) std::snprintf(ratio, sizeof ratio, "%.2fx", *r.ratio);
    std::printf("%10s %12s %18s %18s %11s%s\n", r.model.c_str(), axis_name(r.axis), r.ours.c_str(), r.theirs.c_str(),
                ratio, r.capped ? "  (ours reached the cap)" : "");
  }
  if (o.torch) std::printf("\ngoal ours >= PyTorch on every row: %s\n", goal ? "met" : "MISSED");
}

}  // namespace axonn::bench
