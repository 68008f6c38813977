// Activation recomputation (training.recompute) side by side on this machine's CPU: peak
// memory and step time of none, attention and block, each measured against the layout
// model's prediction:
//   build/bench/bench_recompute [--rounds 3] [--steps 4] [--ranks 1] [--layout 1x1x1x1]
//                               [--layers 6] [--hidden 384] [--heads 6] [--vocab 256]
//                               [--sequence 256] [--batch 8] [--micro-batch 8]
// The model defaults to bench_train_cpu's (10.84M parameters, 2048 tokens per micro-batch).
// Each mode runs under `axonn run -n <ranks>` as users run it, the modes alternating in each
// round so all see the same machine load. Measured, per run: the step time (the median of
// rank 0's step_s over the steps after the first, metrics.jsonl) and rank 0's peak memory for
// training (RSS above the process's memory before the model existed, summary.json); the
// report gives each one's median over rounds. Predicted: the run's own predicted step time
// (the site's peak FLOP/s x efficiency; recomputation's FLOPs included) and its predicted
// memory (the layout model plus the host staging of checkpoints), and the layout model's
// activations per mode (layout_memory.hpp), the part recomputation changes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "bench_cpu_job.hpp"
#include "layout/layout_memory.hpp"
#include "layout/model_plan.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn;
using axonn::bench::cpu_job_options;
using axonn::bench::cpu_job_toml;
using axonn::bench::CpuJob;
using axonn::bench::median;
using axonn::bench::per_step_after_first;
using axonn::bench::parse_bench_args;
using axonn::bench::rank0_of;
using axonn::bench::read_cpu_job;
using axonn::bench::run_cpu_job;

constexpr double kMiB = 1024.0 * 1024.0;
const std::string kProgram = "bench_recompute";

struct Run {
  double step_s = 0, predicted_step_s = 0;
  double memory = 0, predicted_memory = 0;  // bytes, rank 0
};

Run run_mode(const fs::path& dir, const CpuJob& o, Recompute mode) {
  const std::string summary =
      run_cpu_job(kProgram, dir, o, std::string("training.recompute=") + recompute_name(mode));
  return {median(per_step_after_first(dir / "run", "step_s")),
          median(per_step_after_first(dir / "run", "predicted_step_s")),
          rank0_of(kProgram, summary, "model_memory_bytes"), rank0_of(kProgram, summary, "predicted_memory_bytes")};
}

}  // namespace

int main(int argc, char** argv) {
  const CpuJob o = parse_bench_args(argc, argv, cpu_job_options(), kProgram + " [options]",
                                    [](const Args& args) { return read_cpu_job(args, CpuJob{}); });
  const Layout layout = parse_layout(o.layout);
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-recompute-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << cpu_job_toml(o);

  ChooserInput plan;
  plan.model = o.model;
  plan.batch = {o.batch, o.micro_batch, ElementType::float32};
  const BatchSplit split = batch_split(o.model, plan.batch, layout);
  const ModelShape& m = o.model;
  std::printf("activation recomputation: %d layers, hidden %d, %d heads, vocab %d, sequence %d (%.2fM parameters)\n",
              m.layers, m.hidden, m.heads, m.vocab, m.sequence, static_cast<double>(parameters_total(m)) / 1e6);
  std::printf("%d rank(s) at %s (axonn run, CPU backend); per rank %d micro-batch(es) of %d sequences (%lld tokens)\n",
              o.ranks, o.layout.c_str(), split.accumulation, split.micro_batch, static_cast<long long>(split.tokens));
  std::printf("%d rounds, modes alternating; %d steps per run, the first untimed; medians over rounds; rank 0\n\n",
              o.rounds, o.steps);

  std::map<Recompute, std::vector<Run>> runs;
  for (int r = 0; r < o.rounds; ++r)
    for (Recompute mode : kRecomputeModes) runs[mode].push_back(run_mode(dir, o, mode));

  std::map<Recompute, Run> med;
  for (Recompute mode : kRecomputeModes) {
    std::vector<double> step, predicted_step, memory, predicted_memory;
    for (const Run& run : runs[mode]) {
      step.push_back(run.step_s);
      predicted_step.push_back(run.predicted_step_s);
      memory.push_back(run.memory);
      predicted_memory.push_back(run.predicted_memory);
    }
    med[mode] = {median(step), median(predicted_step), median(memory), median(predicted_memory)};
  }
  const Run& none = med[Recompute::none];
  const double activations_none = static_cast<double>(estimate_memory(plan, layout, Recompute::none).activations);
  std::printf("%-10s %11s %11s %9s %9s %13s %13s %9s %9s %14s %7s\n", "recompute", "step s", "predicted", "time",
              "pred.", "memory MiB", "predicted", "memory", "pred.", "activations", "vs");
  std::printf("%-10s %11s %11s %9s %9s %13s %13s %9s %9s %14s %7s\n", "", "measured", "step s", "vs none", "vs none",
              "measured", "MiB", "vs none", "vs none", "predicted MiB", "none");
  for (Recompute mode : kRecomputeModes) {
    const Run& x = med[mode];
    const double activations = static_cast<double>(estimate_memory(plan, layout, mode).activations);
    std::printf("%-10s %11.3f %11.3f %8.2fx %8.2fx %13.1f %13.1f %8.2fx %8.2fx %14.1f %6.2fx\n", recompute_name(mode),
                x.step_s, x.predicted_step_s, x.step_s / none.step_s, x.predicted_step_s / none.predicted_step_s,
                x.memory / kMiB, x.predicted_memory / kMiB, x.memory / none.memory,
                x.predicted_memory / none.predicted_memory, activations / kMiB, activations / activations_none);
  }
  const Run& block = med[Recompute::block];
  std::printf(
      "\nblock against none: memory %.1f MiB less measured (%.1f MiB predicted), step time %+.0f%% "
      "measured (%+.0f%% predicted)\n",
      (none.memory - block.memory) / kMiB, (none.predicted_memory - block.predicted_memory) / kMiB,
      100.0 * (block.step_s / none.step_s - 1.0), 100.0 * (block.predicted_step_s / none.predicted_step_s - 1.0));
  std::printf("activations at block: %.3f of none's; 1/L = %.3f (the blocks' inputs) plus one block's working set\n",
              static_cast<double>(estimate_memory(plan, layout, Recompute::block).activations) / activations_none,
              1.0 / m.layers);
  fs::remove_all(dir);
  return 0;
}
