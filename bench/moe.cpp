// An MoE model against the dense model of the same active parameters, side by side on this
// machine's CPU: one rank, the tiny-to-small GPT of bench_train_cpu with every block's MLP
// replaced by E experts of the same size and top-1 routing (each token still runs through one
// MLP), so the step-time ratio is what routing, permutation and the per-expert GEMMs cost
// (goal: at most 1.3x). A top-2 row shows the price of a second expert per token.
//   build/bench/bench_moe [--experts 4] [--rounds 3] [--steps 4] [--ranks 1] [--layout 1x1x1x1]
//                         [--layers 6] [--hidden 384] [--heads 6] [--vocab 256]
//                         [--sequence 256] [--batch 8] [--micro-batch 8]
// Each setting runs under `axonn run -n <ranks>` as users run it, the settings alternating in
// each round so all see the same machine load; per run the median of rank 0's step_s over the
// steps after the first (metrics.jsonl), and its predicted step time; the report gives each
// one's median over rounds. The all-to-all's bus bandwidth beside Gloo's all-reduce of the
// same bytes is bench_comm's (its all_to_all columns).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_cpu_job.hpp"
#include "layout/model_plan.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn;
using axonn::bench::cpu_job_options;
using axonn::bench::cpu_job_toml;
using axonn::bench::CpuJob;
using axonn::bench::median;
using axonn::bench::per_step_after_first;
using axonn::bench::run_cpu_job;

const std::string kProgram = "bench_moe";

struct Setting {
  std::string name;
  std::string overrides;  // model keys on axonn run's command line
  std::vector<double> step_s, predicted_s;
};

struct Options {
  CpuJob job;
  int experts = 4;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<OptionSpec> specs = cpu_job_options();
  specs.push_back({"experts", true, "experts per MoE layer (default 4)"});
  const Options o = bench::parse_bench_args(argc, argv, specs, kProgram + " [options]", [](const Args& args) {
    Options parsed;
    parsed.experts = bench::count_option(args, "experts", parsed.experts);
    parsed.job = bench::read_cpu_job(args, CpuJob{});
    return parsed;
  });
  const CpuJob& job = o.job;
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-moe-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << cpu_job_toml(job);

  const std::string experts = "model.experts=" + std::to_string(o.experts);
  std::vector<Setting> settings = {{"dense", "", {}, {}},
                                   {"moe top-1", experts + " model.top_k=1", {}, {}},
                                   {"moe top-2", experts + " model.top_k=2", {}, {}}};
  const ModelShape& m = job.model;
  ModelShape moe = m;
  moe.experts = o.experts;
  moe.top_k = 1;
  std::printf("MoE against dense: %d layers, hidden %d, %d heads, vocab %d, sequence %d; dense %.2fM parameters, "
              "MoE %.2fM with %d experts per block (one expert's worth active per token at top-1)\n",
              m.layers, m.hidden, m.heads, m.vocab, m.sequence, static_cast<double>(parameters_total(m)) / 1e6,
              static_cast<double>(parameters_total(moe)) / 1e6, o.experts);
  std::printf("%d rank(s) at %s (axonn run, CPU backend), batch %d, micro-batch %d; %d rounds, settings alternating; "
              "%d steps per run, the first untimed; medians over rounds; rank 0\n\n",
              job.ranks, job.layout.c_str(), job.batch, job.micro_batch, job.rounds, job.steps);

  for (int r = 0; r < job.rounds; ++r)
    for (Setting& s : settings) {
      run_cpu_job(kProgram, dir, job, s.overrides);
      s.step_s.push_back(median(per_step_after_first(dir / "run", "step_s")));
      s.predicted_s.push_back(median(per_step_after_first(dir / "run", "predicted_step_s")));
    }

  const double dense = median(settings[0].step_s), dense_predicted = median(settings[0].predicted_s);
  std::printf("%-10s %10s %10s %10s %10s\n", "model", "step s", "vs dense", "predicted", "vs dense");
  for (const Setting& s : settings) {
    const double step = median(s.step_s), predicted = median(s.predicted_s);
    std::printf("%-10s %10.4f %9.2fx %10.4f %9.2fx\n", s.name.c_str(), step, step / dense, predicted,
                predicted / dense_predicted);
  }
  std::printf("\nmoe top-1 over dense, the same active parameters: %.2fx (goal <= 1.3x)\n",
              median(settings[1].step_s) / dense);
  fs::remove_all(dir);
  return 0;
}
