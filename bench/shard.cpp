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

#include "bench_stats.hpp"
#include "layout/layout_memory.hpp"
#include "layout/layout_volume.hpp"
#include "layout/model_plan.hpp"
#include "subprocess.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn;
using axonn::bench::median;
using axonn::bench::read_text;
using axonn::bench::run_capture;

const std::string kAxonn = std::string(AXONN_BINARY_DIR) + "/bin/axonn";
constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  int rounds = 3;
  int steps = 4;  // per run; the first is its warm-up
  int ranks = 2;
  std::string layout = "2x1x1x1";
  ModelShape model{6, 384, 6, 256, 256};
  int batch = 4;
  int micro_batch = 2;
};

int usage() {
  std::fprintf(stderr,
               "usage: bench_shard [--rounds R] [--steps S] [--ranks N] [--layout DxXxYxZ] [--layers L] [--hidden C] "
               "[--heads H] [--vocab V] [--sequence T] [--batch B] [--micro-batch mb]\n");
  return 2;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    const int n = std::atoi(v.c_str());
    if (a == "--rounds")
      o.rounds = n;
    else if (a == "--steps")
      o.steps = n;
    else if (a == "--ranks")
      o.ranks = n;
    else if (a == "--layout")
      o.layout = v;
    else if (a == "--layers")
      o.model.layers = n;
    else if (a == "--hidden")
      o.model.hidden = n;
    else if (a == "--heads")
      o.model.heads = n;
    else if (a == "--vocab")
      o.model.vocab = n;
    else if (a == "--sequence")
      o.model.sequence = n;
    else if (a == "--batch")
      o.batch = n;
    else if (a == "--micro-batch")
      o.micro_batch = n;
    else
      return false;
  }
  return o.rounds > 0 && o.steps > 1 && o.ranks > 0;
}

std::string job_toml(const Options& o) {
  const ModelShape& m = o.model;
  return "[model]\nlayers = " + std::to_string(m.layers) + "\nhidden = " + std::to_string(m.hidden) +
         "\nheads = " + std::to_string(m.heads) + "\nvocab = " + std::to_string(m.vocab) +
         "\nsequence = " + std::to_string(m.sequence) + "\n[training]\nglobal_batch = " + std::to_string(o.batch) +
         "\nmicro_batch = " + std::to_string(o.micro_batch) +
         "\nlr = 1e-4\nwarmup_steps = 0\nrecompute = \"none\"\ndevice = \"cpu\"\n[checkpoint]\ndir = \"ckpt\"\n"
         "interval = 0\n";
}

// Every value of `key` in rank 0's metrics.jsonl, the first step's left out.
std::vector<double> per_step(const fs::path& run_dir, const std::string& key) {
  std::ifstream in(run_dir / "metrics.jsonl");
  const std::regex re("\"" + key + R"(\": ([-0-9.eE+]+))");
  std::vector<double> out;
  bool first = true;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    if (!first) out.push_back(std::stod(m[1]));
    first = false;
  }
  return out;
}

// Rank 0's entry of summary.json's per-rank array `key`.
double rank0_of(const std::string& summary, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"" + key + R"(\": \[([-0-9.eE+]+))"))) {
    std::fprintf(stderr, "bench_shard: no %s in summary.json:\n%s\n", key.c_str(), summary.c_str());
    std::exit(1);
  }
  return std::stod(m[1]);
}

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

Run run_mode(const fs::path& dir, const Options& o, bool shard) {
  fs::remove_all(dir / "ckpt");
  fs::remove_all(dir / "run");
  const std::string command = "cd " + dir.string() + " && AXONN_LAYOUT=" + o.layout + " " + kAxonn + " run -n " +
                              std::to_string(o.ranks) + " job.toml training.steps=" + std::to_string(o.steps) +
                              " training.shard_optimizer=" + (shard ? "true" : "false") + " run.dir=run 2>&1";
  int status = 0;
  const std::string output = run_capture(command, status);
  if (status != 0) {
    std::fprintf(stderr, "bench_shard: failed (status %d): %s\n%s\n", status, command.c_str(), output.c_str());
    std::exit(1);
  }
  const std::string summary = read_text(dir / "run" / "summary.json");
  if (summary.find("\"comm_bytes_match\": true") == std::string::npos) {
    std::fprintf(stderr, "bench_shard: counted bytes differ from the layout model:\n%s\n", summary.c_str());
    std::exit(1);
  }
  Run run{median(per_step(dir / "run", "step_s")),
          median(per_step(dir / "run", "predicted_step_s")),
          rank0_of(summary, "model_memory_bytes"),
          rank0_of(summary, "predicted_memory_bytes"),
          0,
          0};
  run.reduce_s = shard ? comm_seconds(summary, "data.reduce_scatter") : comm_seconds(summary, "data.all_reduce");
  run.gather_s = comm_seconds(summary, "data.all_gather");
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return usage();
  const Layout layout = parse_layout(o.layout);
  if (layout.world() != o.ranks || layout.data < 2) {
    std::fprintf(stderr,
                 "bench_shard: layout %s has %d ranks and G_data = %d; --ranks is %d, and G_data must be >= 2\n",
                 o.layout.c_str(), layout.world(), layout.data, o.ranks);
    return 2;
  }
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-shard-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << job_toml(o);

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
