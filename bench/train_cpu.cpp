// Training throughput of the CPU trainer on one rank, against two references measured in the
// same run:
//   1. PyTorch CPU training the same GPT-2 with the same step (bench/train_cpu_torch.py under
//      Debian's /usr/bin/python3; same thread count, batch, sequence, AdamW, clipping), goal
//      ours/PyTorch >= 1.0x;
//   2. OpenBLAS sgemm at 1024^3 with the same thread count, the physical limit of a CPU step
//      made of GEMMs; goal: our achieved FLOP/s >= 50% of it.
// FLOPs per step are the layout model's (layout_cost.cpp flops_per_rank: 6·tokens·(k·n) per
// linear layer incl. the tied head, 12·B·H·T²·d for attention, the usual full-matrix count),
// the same number for both sides, so FLOP/s ratios equal tokens/s ratios.
//
// The machine is shared and noisy, so the sides alternate: each round measures sgemm, then our
// trainer, then PyTorch, and the ratios are taken within a round; the report gives the median
// over rounds and the min..max.
//
// usage: bench_train_cpu [--threads N] [--rounds R] [--steps S] [--layers L] [--hidden C]
//                        [--heads H] [--vocab V] [--sequence T] [--batch B] [--micro-batch mb]
//                        [--python PATH] [--no-torch] [--profile]
// Our side is in-process: CpuBackend, a one-rank CommGrid, Trainer on the built-in corpus.
// --profile: no references; our step's time per backend op (GEMMs per shape), the rest of the
// step being host code between the ops.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "comm/comm_grid.hpp"
#include "config/job_config.hpp"
#include "layout/layout_cost.hpp"
#include "op_profile.hpp"
#include "solo_trainer.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/train/trainer.hpp"

#ifndef AXONN_SOURCE_DIR
#error "AXONN_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif

using namespace axonn;
using namespace axonn::bench;

namespace {

struct Options {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int rounds = 3;
  int steps = 5;  // timed steps per round and side, after 2 untimed ones
  ModelShape model{6, 384, 6, 256, 256};
  int batch = 8;
  int micro_batch = 8;
  std::string python = "/usr/bin/python3";
  bool torch = true;
  bool profile = false;
};

struct Spread {
  double median, min, max;
};

Spread spread(const std::vector<double>& v) {
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

// Best FLOP/s of 1024^3 sgemm over a few calls: OpenBLAS's peak with its own `threads`
// threads. The CPU backend keeps OpenBLAS single-threaded (it splits GEMMs over its own pool),
// so the count is set for these calls and put back to one after them.
double sgemm_peak_flops(int threads) {
  const int n = 1024;
  openblas_set_num_threads(threads);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 1e30;
  for (int r = 0; r < 8; ++r) {
    const auto start = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::min(best, seconds_since(start));
  }
  openblas_set_num_threads(1);
  return 2.0 * n * n * n / best;
}

JobConfig bench_job(const Options& o) { return bench_train_job("bench_train_cpu", o.model, o.batch, o.micro_batch); }

// Seconds of each of `steps` timed steps (after 2 untimed ones) of our trainer.
std::vector<double> our_step_times(Trainer& trainer, int steps) {
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    const auto start = Clock::now();
    trainer.train_step();
    if (s >= 2) times.push_back(seconds_since(start));
  }
  return times;
}

// Runs the PyTorch side once and returns its timed step seconds; throws with its output on failure.
std::vector<double> torch_step_times(const Options& o) {
  const std::string command = o.python + " " AXONN_SOURCE_DIR "/bench/train_cpu_torch.py" +
                              torch_model_flags(o.model, o.batch, o.micro_batch) + " --threads " +
                              std::to_string(o.threads) + " --steps " + std::to_string(o.steps) + " 2>&1";
  int status = 0;
  const std::string output = run_capture(command, status);
  const size_t key = output.rfind("{\"step_s\": [");
  if (status != 0 || key == std::string::npos)
    throw std::runtime_error("PyTorch side failed (" + command + "):\n" + output);
  std::vector<double> times;
  const char* p = output.c_str() + key + 12;
  for (char* end = nullptr;; p = end + 1) {
    const double t = std::strtod(p, &end);
    if (end == p) break;
    times.push_back(t);
    if (*end != ',') break;
  }
  if (times.empty()) throw std::runtime_error("PyTorch side printed no step times:\n" + output);
  return times;
}

const std::vector<OptionSpec> kOptions = {
    {"threads", true, "threads of both sides (default: the hardware's)"},
    {"rounds", true, "rounds of sgemm, our trainer and PyTorch (default 3)"},
    {"steps", true, "timed steps per round and side, after 2 untimed ones (default 5)"},
    {"layers", true, "model layers (default 6)"},
    {"hidden", true, "model hidden size C (default 384)"},
    {"heads", true, "attention heads H (default 6)"},
    {"vocab", true, "vocabulary V (default 256)"},
    {"sequence", true, "sequence length T (default 256)"},
    {"batch", true, "global batch B (default 8)"},
    {"micro-batch", true, "micro-batch mb (default 8)"},
    {"python", true, "the Python that runs bench/train_cpu_torch.py (default /usr/bin/python3)"},
    {"no-torch", false, "skip the PyTorch side"},
    {"profile", false, "no references: our step's time per backend op"},
    {"help", false, "this help"},
};

Options read_options(const Args& args) {
  no_positionals(args);
  Options o;
  o.torch = !args.has("no-torch");
  o.profile = args.has("profile");
  o.threads = count_option(args, "threads", o.threads);
  o.rounds = count_option(args, "rounds", o.rounds);
  o.steps = count_option(args, "steps", o.steps);
  read_model_options(args, o.model, o.batch, o.micro_batch);
  o.python = args.value("python").value_or(o.python);
  return o;
}

// Our trainer's step split by backend op (op_profile.hpp).
int profile(const Options& o, const JobConfig& job, const DataMixture& data) {
  CpuBackend cpu(o.threads);
  bench::TimedBackend timed(cpu);
  SoloExchange exchange;
  CommGrid grid(exchange, Layout{}, std::chrono::seconds(10), true);
  Trainer trainer(timed.backend(), grid, job, data);
  bench::print_op_profile(timed, trainer, o.steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_bench_args(argc, argv, kOptions, "bench_train_cpu [options]", read_options);
  const ModelShape& m = o.model;
  const JobConfig job = bench_job(o);
  auto corpus = std::make_shared<const TokenData>(builtin_corpus());
  corpus->validate(m.vocab, m.sequence, o.batch);
  const DataMixture data = DataMixture::single(corpus, job.training.seed, m.sequence);
  if (o.profile) return profile(o, job, data);

  CpuBackend backend(o.threads);
  SoloExchange exchange;
  CommGrid grid(exchange, Layout{}, std::chrono::seconds(10), true);
  Trainer trainer(backend, grid, job, data);

  ChooserInput plan;
  plan.model = m;
  plan.batch = {o.batch, o.micro_batch, ElementType::float32};
  const double flops = flops_per_rank(plan, Layout{});
  const double tokens = static_cast<double>(o.batch) * m.sequence;
  std::printf("model: %d layers, hidden %d, %d heads, vocab %d, sequence %d; %.2fM parameters\n", m.layers, m.hidden,
              m.heads, m.vocab, m.sequence, static_cast<double>(trainer.params().size()) / 1e6);
  std::printf("step: %d sequences (%.0f tokens) in micro-batches of %d, AdamW + clipping; %.1f GFLOP per step\n",
              o.batch, tokens, trainer.split().micro_batch, flops / 1e9);
  std::printf("threads: %d (OpenBLAS and PyTorch); %d rounds of %d timed steps per side\n\n", o.threads, o.rounds,
              o.steps);
  std::printf("%6s %12s %12s %12s %12s %12s %10s %10s\n", "round", "sgemm GF/s", "ours tok/s", "ours GF/s",
              "torch tok/s", "torch GF/s", "ours/torch", "ours/peak");

  std::vector<double> peak, ours, torch, vs_torch, vs_peak;
  double best_ours_s = 1e30, best_torch_s = 1e30;
  for (int r = 0; r < o.rounds; ++r) {
    peak.push_back(sgemm_peak_flops(o.threads));
    const std::vector<double> our_steps = our_step_times(trainer, o.steps);
    best_ours_s = std::min(best_ours_s, *std::min_element(our_steps.begin(), our_steps.end()));
    ours.push_back(tokens / median(our_steps));
    const double our_flops = ours.back() / tokens * flops;
    vs_peak.push_back(our_flops / peak.back());
    std::printf("%6d %12.1f %12.0f %12.1f", r + 1, peak.back() / 1e9, ours.back(), our_flops / 1e9);
    if (o.torch) {
      const std::vector<double> torch_steps = torch_step_times(o);
      best_torch_s = std::min(best_torch_s, *std::min_element(torch_steps.begin(), torch_steps.end()));
      torch.push_back(tokens / median(torch_steps));
      vs_torch.push_back(ours.back() / torch.back());
      std::printf(" %12.0f %12.1f %9.2fx", torch.back(), torch.back() / tokens * flops / 1e9, vs_torch.back());
    } else {
      std::printf(" %12s %12s %10s", "-", "-", "-");
    }
    std::printf(" %9.1f%%\n", 100.0 * vs_peak.back());
    std::fflush(stdout);
  }

  auto line = [](const char* what, const std::vector<double>& v, double unit, const char* fmt) {
    const Spread s = spread(v);
    std::printf("  %-34s ", what);
    std::printf(fmt, s.median * unit, s.min * unit, s.max * unit);
    std::printf("\n");
  };
  std::printf("\nmedian over rounds (min..max):\n");
  line("sgemm 1024^3 GFLOP/s", peak, 1e-9, "%8.1f  (%.1f..%.1f)");
  line("ours tokens/s", ours, 1.0, "%8.0f  (%.0f..%.0f)");
  if (o.torch) line("PyTorch tokens/s", torch, 1.0, "%8.0f  (%.0f..%.0f)");
  if (o.torch) line("ours / PyTorch (goal >= 1.0x)", vs_torch, 1.0, "%8.2fx (%.2f..%.2f)");
  line("ours / sgemm peak (goal >= 50%)", vs_peak, 100.0, "%7.1f%%  (%.1f..%.1f)");

  // Other jobs on a shared machine only slow a step down: the fastest step of each side and
  // the fastest sgemm are the least disturbed estimates of what the machine does alone.
  const double best_peak = *std::max_element(peak.begin(), peak.end());
  std::printf("\nfastest step of each side, fastest sgemm (least disturbed by other load):\n");
  std::printf("  %-34s %8.1f\n", "sgemm 1024^3 GFLOP/s", best_peak / 1e9);
  std::printf("  %-34s %8.0f  (%.1f GFLOP/s)\n", "ours tokens/s", tokens / best_ours_s, flops / best_ours_s / 1e9);
  if (o.torch) {
    std::printf("  %-34s %8.0f  (%.1f GFLOP/s)\n", "PyTorch tokens/s", tokens / best_torch_s,
                flops / best_torch_s / 1e9);
    std::printf("  %-34s %8.2fx\n", "ours / PyTorch", best_torch_s / best_ours_s);
  }
  std::printf("  %-34s %7.1f%%\n", "ours / sgemm peak", 100.0 * flops / best_ours_s / best_peak);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_train_cpu: %s\n", e.what());
  return 1;
}
