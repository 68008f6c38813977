// The tensor-parallel all-reduces beside compute, measured side by side on this machine:
//   build/bench/bench_tp_overlap [--reps 2] [--steps 6] [--chunks 2]
// On 4 ranks (axonn run -n 4, Gloo on loopback) each tensor-parallel layout (1x2x1x2, 1x4x1x1,
// 1x1x2x2, 2x2x1x1) trains the same job three ways, alternating, `reps` times each:
//   blocking    training.overlap_comm = false: every x and y all-reduce waited for where issued;
//   OAR         overlap on, training.tp_chunks = 1: each dX all-reduce beside its dW GEMM;
//   OAR+chunks  overlap on, tp_chunks = --chunks: each linear layer's x and y sums in row
//               chunks, chunk i's beside chunk i+1's GEMM.
// A run's step time is the median of rank 0's step_s after the first step (metrics.jsonl).
// Hidden measured: of the x and y all-reduces started beside compute, the part rank 0 did not
// wait for (summary.json's comm_profile hidden_fraction, per axis); predicted: the layout
// model's for the same calls (predicted_hidden_fraction), with the site of an
// `axonn calibrate --quick` on the same 4 ranks and job (its overlap probe). CPU ranks share
// the cores their collectives use, so this bounds what a GPU gains, whose NIC and copy
// engines move the bytes; the mechanism is the one the GPU path runs.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_cpu_job.hpp"
#include "config/site_config.hpp"
#include "subprocess.hpp"

namespace {

namespace fs = std::filesystem;
using axonn::bench::median;

constexpr int kRanks = 4;

// Wide enough that the x and y all-reduces ([512 rows, 512 / G] floats) take a measurable
// share of a step, small enough for a step in about a second on two cores.
axonn::bench::CpuJob job_at(const std::string& layout, int steps) {
  axonn::bench::CpuJob job;
  job.ranks = kRanks;
  job.layout = layout;
  job.steps = steps;
  job.model = axonn::ModelShape{2, 512, 8, 2048, 128};
  job.batch = 8;
  job.micro_batch = 4;
  return job;
}

// summary.json's comm_profile entry of `axis` all_reduce: its `key` (a fraction or null).
std::optional<double> profile_fraction(const std::string& summary, const std::string& axis, const std::string& key) {
  const std::string entry = "{\"axis\": \"" + axis + "\", \"kind\": \"all_reduce\"";
  const size_t at = summary.find(entry);
  if (at == std::string::npos) return std::nullopt;
  const std::string object = summary.substr(at, summary.find('}', at) - at);
  std::smatch m;
  if (!std::regex_search(object, m, std::regex("\"" + key + R"(\": ([-0-9.eE+]+))"))) return std::nullopt;
  return std::stod(m[1]);
}

struct Run {
  double step_s = 0;
  double predicted_step_s = 0;
  std::optional<double> hidden, predicted_hidden;  // of the tensor axes' started all-reduces
};

// The tensor axis whose all-reduces the layout has (x when both: 2x2x1x1 has only x).
std::string tensor_axis(const std::string& layout) {
  const int x = std::stoi(layout.substr(2, 1));
  return x > 1 ? "x" : "y";
}

Run run_job(const fs::path& dir, const std::string& layout, int steps, bool overlap, int chunks) {
  const std::string overrides = "--site site.toml training.overlap_comm=" + std::string(overlap ? "true" : "false") +
                                " training.tp_chunks=" + std::to_string(chunks);
  const std::string summary = axonn::bench::run_cpu_job("bench_tp_overlap", dir, job_at(layout, steps), overrides);
  const std::string axis = tensor_axis(layout);
  return {median(axonn::bench::per_step_after_first(dir / "run", "step_s")),
          axonn::bench::summary_number("bench_tp_overlap", summary, "predicted_step_s"),
          profile_fraction(summary, axis, "hidden_fraction"),
          profile_fraction(summary, axis, "predicted_hidden_fraction")};
}

std::string percent(const std::vector<std::optional<double>>& values) {
  std::vector<double> known;
  for (const auto& v : values)
    if (v) known.push_back(*v);
  if (known.empty()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * median(known));
  return buf;
}

struct Options {
  int reps = 2;
  int steps = 6;
  int chunks = 2;
};

Options read_options(const axonn::Args& args) {
  axonn::bench::no_positionals(args);
  Options o;
  o.reps = static_cast<int>(args.integer("reps", 1, 1000).value_or(o.reps));
  o.steps = static_cast<int>(args.integer("steps", 2, 100000).value_or(o.steps));
  o.chunks = static_cast<int>(args.integer("chunks", 2, 64).value_or(o.chunks));
  return o;
}

const std::vector<axonn::OptionSpec> kOptions = {
    {"reps", true, "runs of each layout in each way, alternating (default 2)"},
    {"steps", true, "training steps of every run, the first untimed (default 6)"},
    {"chunks", true, "training.tp_chunks of the OAR+chunks runs (default 2)"},
    {"help", false, "this help"},
};

}  // namespace

int main(int argc, char** argv) {
  const auto [reps, steps, chunks] =
      axonn::bench::parse_bench_args(argc, argv, kOptions, "bench_tp_overlap [options]", read_options);
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-tp-overlap-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << axonn::bench::cpu_job_toml(job_at("1x1x1x1", steps));
  std::printf("tensor-parallel overlap: %d ranks (axonn run, Gloo on loopback), %d steps, %d reps, chunks %d\n",
              kRanks, steps, reps, chunks);
  axonn::bench::calibrate_quick("bench_tp_overlap", dir, kRanks);
  const axonn::SiteConfig site = axonn::load_site_config((dir / "site.toml").string());
  std::printf("calibrated with the same ranks and job: overlap intra-node %s\n",
              axonn::overlap_curve_text(site.intra_node_overlap).c_str());
  std::printf("%-9s %4s %10s %10s %10s %8s %8s %17s %17s %30s\n", "layout", "axis", "blocking", "OAR", "OAR+chunks",
              "OAR", "chunks", "hidden meas.", "hidden pred.", "predicted step s");
  std::printf("%-9s %4s %10s %10s %10s %8s %8s %17s %17s %30s\n", "", "", "step s", "step s", "step s", "speedup",
              "speedup", "OAR / chunks", "OAR / chunks", "blocking / OAR / chunks");
  for (const std::string layout : {"1x2x1x2", "1x4x1x1", "1x1x2x2", "2x2x1x1"}) {
    std::vector<double> blocking, oar, chunked, p_blocking, p_oar, p_chunked;
    std::vector<std::optional<double>> h_oar, h_chunked, ph_oar, ph_chunked;
    for (int r = 0; r < reps; ++r) {
      const Run a = run_job(dir, layout, steps, false, 1);
      const Run b = run_job(dir, layout, steps, true, 1);
      const Run c = run_job(dir, layout, steps, true, chunks);
      blocking.push_back(a.step_s), oar.push_back(b.step_s), chunked.push_back(c.step_s);
      p_blocking.push_back(a.predicted_step_s), p_oar.push_back(b.predicted_step_s);
      p_chunked.push_back(c.predicted_step_s);
      h_oar.push_back(b.hidden), h_chunked.push_back(c.hidden);
      ph_oar.push_back(b.predicted_hidden), ph_chunked.push_back(c.predicted_hidden);
    }
    const double t_a = median(blocking), t_b = median(oar), t_c = median(chunked);
    char predicted[64];
    std::snprintf(predicted, sizeof predicted, "%.4f / %.4f / %.4f", median(p_blocking), median(p_oar),
                  median(p_chunked));
    std::printf("%-9s %4s %10.4f %10.4f %10.4f %7.2fx %7.2fx %17s %17s %30s\n", layout.c_str(),
                tensor_axis(layout).c_str(), t_a, t_b, t_c, t_a / t_b, t_a / t_c,
                (percent(h_oar) + " / " + percent(h_chunked)).c_str(),
                (percent(ph_oar) + " / " + percent(ph_chunked)).c_str(), predicted);
  }
  fs::remove_all(dir);
  return 0;
}
