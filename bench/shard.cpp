// The optimizer sharded over data (training.shard_optimizer) against the unsharded one, side
// by side on this machine's CPU: peak memory and step time, each beside the layout model's
// prediction, and what the data axis's collectives took:
//   build/bench/bench_shard [--rounds 3] [--steps 4] [--ranks 2] [--layout 2x1x1x1]
//                           [--layers 6] [--hidden 384] [--heads 6] [--vocab 256]
//                           [--sequence 256] [--batch 4] [--micro-batch 2]
// The model defaults to bench_train_cpu's (10.84M parameters: 41 MiB per float32 copy), on two
// data-parallel ranks. Each mode runs under `axonn run -n <ranks>` as users run it, the modes
// alternating in each round so both see the same machine load. Measured, per run: the step
// time (the median of rank 0's step_s over the steps after the first, metrics.jsonl), rank 0's
// peak memory for training (RSS above the process's memory before the model existed) and its
// seconds per step in each data-axis collective (summary.json: from start to end of each call,
// on the communicator's thread for the ones overlapped with compute); the report gives each
// one's median over rounds. Predicted: the run's own step time and memory (the layout model,
// plus the host staging of checkpoints), and the layout model's optimizer state (gradients,
// AdamW moments), the part sharding changes.
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
#include "layout/layout_volume.hpp"
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
const std::string kProgram = "bench_shard";

// Seconds per step of one "axis.kind" in summary.json's comm_seconds_per_step (0 if absent).
double comm_seconds(const std::string& summary, const std::string& axis_kind) {
  const size_t at = summary.find("\"comm_seconds_per_step\": {");
  if (at == std::string::npos) return 0;
  const std::string seconds = summary.substr(at, summary.find('}', at) - at + 1);
  std::smatch m;
  if (!std::regex_search(seconds, m, std::regex("\"" + axis_kind + R"(\": ([-0-9.eE+]+)[,}])"))) return 0;
  return std::stod(m[1]);
}

struct Run {
  double step_s = 0, predicted_step_s = 0;
  double memory = 0, predicted_memory = 0;  // bytes, rank 0
  double reduce_s = 0, gather_s = 0;        // data axis, per step, rank 0
};

Run run_mode(const fs::path& dir, const CpuJob& o, bool shard) {
  const std::string summary =
      run_cpu_job(kProgram, dir, o, std::string("training.shard_optimizer=") + (shard ? "true" : "false"));
  Run run{median(per_step_after_first(dir / "run", "step_s")),
          median(per_step_after_first(dir / "run", "predicted_step_s")),
          rank0_of(kProgram, summary, "model_memory_bytes"),
          rank0_of(kProgram, summary, "predicted_memory_bytes"),
          0,
          0};
  run.reduce_s = shard ? comm_seconds(summary, "data.reduce_scatter") : comm_seconds(summary, "data.all_reduce");
  run.gather_s = comm_seconds(summary, "data.all_gather");
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  CpuJob defaults;  // 2 ranks over data, 2 micro-batches of 2 each
  defaults.ranks = 2;
  defaults.layout = "2x1x1x1";
  defaults.batch = 4;
  defaults.micro_batch = 2;
  const CpuJob o = parse_bench_args(argc, argv, cpu_job_options(), kProgram + " [options]",
                                    [&](const Args& args) { return read_cpu_job(args, defaults); });
  const Layout layout = parse_layout(o.layout);
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-shard-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << cpu_job_toml(o);

  ChooserInput plan;
  plan.model = o.model;
  plan.batch = {o.batch, o.micro_batch, ElementType::float32};
  const BatchSplit split = batch_split(o.model, plan.batch, layout);
  const ModelShape& m = o.model;
  std::printf("optimizer sharding: %d layers, hidden %d, %d heads, vocab %d, sequence %d (%.2fM parameters)\n",
              m.layers, m.hidden, m.heads, m.vocab, m.sequence, static_cast<double>(parameters_total(m)) / 1e6);
  std::printf("%d ranks at %s (axonn run, CPU backend, overlap on); per rank %d micro-batch(es) of %d sequences\n",
              o.ranks, o.layout.c_str(), split.accumulation, split.micro_batch);
  std::printf("%d rounds, modes alternating; %d steps per run, the first untimed; medians over rounds; rank 0\n\n",
              o.rounds, o.steps);

  std::map<bool, std::vector<Run>> runs;
  for (int r = 0; r < o.rounds; ++r)
    for (bool shard : {false, true}) runs[shard].push_back(run_mode(dir, o, shard));

  std::map<bool, Run> med;
  for (bool shard : {false, true}) {
    std::vector<double> step, predicted_step, memory, predicted_memory, reduce, gather;
    for (const Run& run : runs[shard]) {
      step.push_back(run.step_s);
      predicted_step.push_back(run.predicted_step_s);
      memory.push_back(run.memory);
      predicted_memory.push_back(run.predicted_memory);
      reduce.push_back(run.reduce_s);
      gather.push_back(run.gather_s);
    }
    med[shard] = {median(step),   median(predicted_step), median(memory), median(predicted_memory),
                  median(reduce), median(gather)};
  }
  std::printf("%-10s %9s %9s %11s %11s %12s %14s %14s %14s\n", "optimizer", "step s", "predicted", "memory MiB",
              "predicted", "optimizer", "data reduce", "data gather", "data MiB/step");
  std::printf("%-10s %9s %9s %11s %11s %12s %14s %14s %14s\n", "", "measured", "step s", "measured", "MiB", "state MiB",
              "s/step", "s/step", "predicted");
  for (bool shard : {false, true}) {
    const Run& x = med[shard];
    const MemoryEstimate mem = estimate_memory(plan, layout, {Recompute::none, shard});
    const double data_bytes =
        static_cast<double>(predict_step_volume(plan, layout, {Recompute::none, shard}).bytes(CommAxis::data));
    std::printf("%-10s %9.3f %9.3f %11.1f %11.1f %12.1f %14.4f %14.4f %14.1f\n", shard ? "sharded" : "unsharded",
                x.step_s, x.predicted_step_s, x.memory / kMiB, x.predicted_memory / kMiB,
                static_cast<double>(mem.optimizer) / kMiB, x.reduce_s, x.gather_s, data_bytes / kMiB);
  }
  const Run& plain = med[false];
  const Run& sharded = med[true];
  std::printf(
      "\nsharded against unsharded: memory %.1f MiB less measured (%.1f MiB predicted: the layout model's optimizer "
      "state %.1f MiB less, the rest the checkpoint staging); step time %+.1f%% measured (%+.1f%% predicted)\n",
      (plain.memory - sharded.memory) / kMiB, (plain.predicted_memory - sharded.predicted_memory) / kMiB,
      static_cast<double>(estimate_memory(plan, layout, {Recompute::none, false}).optimizer -
                          estimate_memory(plan, layout, {Recompute::none, true}).optimizer) /
          kMiB,
      100.0 * (sharded.step_s / plain.step_s - 1.0), 100.0 * (sharded.predicted_step_s / plain.predicted_step_s - 1.0));
  std::printf(
      "data axis per step: all-reduce %.4f s unsharded; reduce-scatter %.4f s + all-gather %.4f s sharded (the "
      "all-reduce's bytes in two halves; the all-gather runs after the optimizer step, the reductions beside the "
      "last backward)\n",
      plain.reduce_s, sharded.reduce_s, sharded.gather_s);
  fs::remove_all(dir);
  return 0;
}
