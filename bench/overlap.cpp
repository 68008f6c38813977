// How much of the overlapped communication (training.overlap_comm) is hidden behind compute,
// measured side by side on this machine:
//   build/bench/bench_overlap [--reps 3] [--steps 8] [--ranks 2]
// For each layout the same job runs under `axonn run -n <ranks>` with overlap off and on,
// alternating, `reps` times each. A run's step time is the median of rank 0's step_s over
// its steps after the first (metrics.jsonl). The collectives that overlap moves are the z
// all-gathers and reduce-scatters and the data all-reduce: their counted time per step in the off runs
// (summary.json, comm_seconds_per_step) is what could be hidden, and
//   hidden fraction = (step_off - step_on) / that time
// (1: all of it disappeared from the step; 0: none; below 0: overlap made the step slower).
// CPU ranks on loopback: the "network" is the same cores the compute uses, so this bounds
// what a rank gains where the NIC does the moving; the mechanism is the one GPUs use.
// Beside it, what the layout model predicts: first `axonn calibrate --quick` with the same
// ranks and job (its overlap probe gives each tier's hidden fraction), then every run trains
// with that site, and the model's hidden time is the run's predicted step with overlap off
// minus the one with it on (summary.json's predicted_step_s).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_cpu_job.hpp"
#include "config/site_config.hpp"
#include "subprocess.hpp"

namespace {

namespace fs = std::filesystem;
using axonn::bench::median;
using axonn::bench::read_text;

// Big enough that a step's collectives take a measurable share (~17M parameters, ~67 MB of
// float32 gradients), small enough for one step in about a second on two cores.
constexpr const char* kJob = R"([model]
layers = 4
hidden = 512
heads = 8
vocab = 8192
sequence = 64

[training]
global_batch = 4
micro_batch = 2
lr = 1e-4
warmup_steps = 0
device = "cpu"

[checkpoint]
dir = "ckpt"
interval = 0
)";

// summary.json's comm_seconds_per_step for the collectives overlap moves.
double overlappable_comm_s(const std::string& summary) {
  const std::map<std::string, double> seconds = axonn::bench::comm_seconds_per_step("bench_overlap", summary);
  double total = 0;
  for (const char* key : {"z.all_gather", "z.reduce_scatter", "data.all_reduce"})
    if (const auto it = seconds.find(key); it != seconds.end()) total += it->second;
  return total;
}

struct Run {
  double step_s = 0;
  double overlappable_s = 0;
  double predicted_step_s = 0;
};

// One run of job.toml at `layout` with the calibrated site (run_cpu_job: exits when it fails
// or its counted bytes differ from the model's).
Run run_job(const fs::path& dir, int ranks, const std::string& layout, int steps, bool overlap) {
  axonn::bench::CpuJob job;
  job.ranks = ranks;
  job.layout = layout;
  job.steps = steps;
  std::string overrides = "--site site.toml training.overlap_comm=";
  overrides.append(overlap ? "true" : "false");
  const std::string summary = axonn::bench::run_cpu_job("bench_overlap", dir, job, overrides);
  return {median(axonn::bench::per_step_after_first(dir / "run", "step_s")), overlappable_comm_s(summary),
          axonn::bench::summary_number("bench_overlap", summary, "predicted_step_s")};
}

struct Options {
  int reps = 3;
  int steps = 8;
  int ranks = 2;
};

Options read_options(const axonn::Args& args) {
  axonn::bench::no_positionals(args);
  Options o;
  o.reps = static_cast<int>(args.integer("reps", 1, 1000).value_or(o.reps));
  o.steps = static_cast<int>(args.integer("steps", 2, 100000).value_or(o.steps));
  o.ranks = static_cast<int>(args.integer("ranks", 1, 4096).value_or(o.ranks));
  return o;
}

const std::vector<axonn::OptionSpec> kOptions = {
    {"reps", true, "runs of each layout with overlap off and on, alternating (default 3)"},
    {"steps", true, "training steps of every run (default 8)"},
    {"ranks", true, "ranks of every run: the data and z layouts are <ranks>x1x1x1 and 1x1x1x<ranks> (default 2)"},
    {"help", false, "this help"},
};

}  // namespace

int main(int argc, char** argv) {
  const auto [reps, steps, ranks] =
      axonn::bench::parse_bench_args(argc, argv, kOptions, "bench_overlap [options]", read_options);
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-overlap-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << kJob;

  // Data parallel (the bucketed all-reduce during the last backward) and z (the forward's
  // all-gathers ahead of use, each dW reduce-scatter beside the next layer); `ranks` each.
  const std::vector<std::string> layouts = {std::to_string(ranks) + "x1x1x1", "1x1x1x" + std::to_string(ranks)};
  std::printf("overlap of communication with compute: %d ranks (axonn run, Gloo on loopback), %d steps, %d reps\n",
              ranks, steps, reps);
  axonn::bench::calibrate_quick("bench_overlap", dir, ranks);
  const axonn::SiteConfig site = axonn::load_site_config((dir / "site.toml").string());
  std::printf(
      "calibrated with the same ranks and job: overlap intra-node %s, inter-node %s (the probe's hidden "
      "fraction by size; the model hides that much of each overlapped collective)\n",
      axonn::overlap_curve_text(site.intra_node_overlap).c_str(),
      axonn::overlap_curve_text(site.inter_node_overlap).c_str());
  std::printf("%-10s %12s %12s %16s %8s %8s %18s %18s\n", "layout", "step off s", "step on s", "overlappable s",
              "hidden", "speedup", "hidden measured s", "hidden predicted s");
  for (const std::string& layout : layouts) {
    std::vector<double> off, on, comm, predicted_hidden;
    for (int r = 0; r < reps; ++r) {
      const Run a = run_job(dir, ranks, layout, steps, false);
      const Run b = run_job(dir, ranks, layout, steps, true);
      off.push_back(a.step_s);
      comm.push_back(a.overlappable_s);
      on.push_back(b.step_s);
      predicted_hidden.push_back(a.predicted_step_s - b.predicted_step_s);
    }
    const double t_off = median(off), t_on = median(on), t_comm = median(comm);
    std::printf("%-10s %12.4f %12.4f %16.4f %7.0f%% %7.2fx %18.4f %18.4f\n", layout.c_str(), t_off, t_on, t_comm,
                100.0 * (t_off - t_on) / t_comm, t_off / t_on, t_off - t_on, median(predicted_hidden));
  }
  fs::remove_all(dir);
  return 0;
}
