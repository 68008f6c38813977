#pragma once
// A small GPT trained on the CPU through `axonn run`, the way the memory-feature benchmarks
// (bench/recompute.cpp, bench/shard.cpp) compare two settings of one job side by side: their
// shared options, the job TOML, one run with a setting overridden, and what the run leaves
// in <dir>/run (metrics.jsonl per step, summary.json per run; bench/overlap.cpp reads its
// runs' steps the same way, bench/model_accuracy.cpp trains many layouts of such jobs).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "layout/layout.hpp"
#include "layout/layout_inputs.hpp"
#include "subprocess.hpp"

namespace axonn::bench {

struct CpuJob {
  int rounds = 3;
  int steps = 4;  // per run; the first is its warm-up
  int ranks = 1;
  int nodes_sim = 1;  // pretend nodes the ranks are split over (axonn run --nodes-sim)
  std::string layout = "1x1x1x1";
  ModelShape model{6, 384, 6, 256, 256};  // bench_train_cpu's model, 10.84M parameters
  int batch = 8;
  int micro_batch = 8;
};

// The options every CpuJob benchmark takes, "help" included.
inline std::vector<OptionSpec> cpu_job_options() {
  return {{"rounds", true, "rounds, the settings alternating in each (default 3)"},
          {"steps", true, "steps per run, the first untimed (default 4)"},
          {"ranks", true, "ranks (axonn run -n)"},
          {"layout", true, "DxXxYxZ, of --ranks ranks"},
          {"layers", true, "model layers"},
          {"hidden", true, "hidden size"},
          {"heads", true, "attention heads"},
          {"vocab", true, "vocabulary"},
          {"sequence", true, "sequence length"},
          {"batch", true, "global batch in sequences"},
          {"micro-batch", true, "micro-batch in sequences"},
          {"help", false, "this help"}};
}

// `defaults` with the options given replaced. UsageError for a layout of another rank count,
// or fewer than two steps (the first is not timed).
inline CpuJob read_cpu_job(const Args& args, CpuJob defaults) {
  no_positionals(args);
  CpuJob o = defaults;
  o.rounds = count_option(args, "rounds", o.rounds);
  o.steps = count_option(args, "steps", o.steps);
  o.ranks = count_option(args, "ranks", o.ranks);
  o.layout = args.value("layout").value_or(o.layout);
  read_model_options(args, o.model, o.batch, o.micro_batch);
  if (o.steps < 2) throw UsageError("--steps " + std::to_string(o.steps) + ": at least 2 (the first is not timed)");
  if (parse_layout(o.layout).world() != o.ranks)
    throw UsageError("--layout " + o.layout + " has " + std::to_string(parse_layout(o.layout).world()) +
                     " ranks, --ranks is " + std::to_string(o.ranks));
  return o;
}

// A CpuJob of an MoE model: the model's experts and top-k beside the job, from --experts and
// --top-k (added to `specs`, the job's options, which the caller may have trimmed).
struct MoeCpuJob {
  CpuJob job;
  int experts = 8;
  int top_k = 2;
};
inline MoeCpuJob parse_moe_cpu_job(int argc, char** argv, const std::string& program, std::vector<OptionSpec> specs,
                                   const CpuJob& job_defaults, int default_experts) {
  specs.push_back({"experts", true, "experts per MoE layer (default " + std::to_string(default_experts) + ")"});
  specs.push_back({"top-k", true, "experts per token (default 2)"});
  return parse_bench_args(argc, argv, specs, program + " [options]", [&](const Args& args) {
    MoeCpuJob parsed;
    parsed.experts = count_option(args, "experts", default_experts);
    parsed.top_k = count_option(args, "top-k", parsed.top_k);
    parsed.job = read_cpu_job(args, job_defaults);
    return parsed;
  });
}

inline std::string cpu_job_toml(const CpuJob& o) {
  const ModelShape& m = o.model;
  return "[model]\nlayers = " + std::to_string(m.layers) + "\nhidden = " + std::to_string(m.hidden) +
         "\nheads = " + std::to_string(m.heads) + "\nvocab = " + std::to_string(m.vocab) +
         "\nsequence = " + std::to_string(m.sequence) + "\n[training]\nglobal_batch = " + std::to_string(o.batch) +
         "\nmicro_batch = " + std::to_string(o.micro_batch) +
         "\nlr = 1e-4\nwarmup_steps = 0\nrecompute = \"none\"\ndevice = \"cpu\"\n[checkpoint]\ndir = \"ckpt\"\n"
         "interval = 0\n";
}

// Every value of `key` in rank 0's <run_dir>/metrics.jsonl, the first step's left out (its
// warm-up).
inline std::vector<double> per_step_after_first(const std::filesystem::path& run_dir, const std::string& key) {
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

// Rank 0's entry of summary.json's per-rank array `key`; exits naming `program` without one.
inline double rank0_of(const std::string& program, const std::string& summary, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"" + key + R"(\": \[([-0-9.eE+]+))"))) {
    std::fprintf(stderr, "%s: no %s in summary.json:\n%s\n", program.c_str(), key.c_str(), summary.c_str());
    std::exit(1);
  }
  return std::stod(m[1]);
}

// The number summary.json holds under `key` (a top-level scalar such as step_s_median); exits
// naming `program` without one.
inline double summary_number(const std::string& program, const std::string& summary, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"" + key + R"(\": ([-0-9.eE+]+))"))) {
    std::fprintf(stderr, "%s: no %s in summary.json:\n%s\n", program.c_str(), key.c_str(), summary.c_str());
    std::exit(1);
  }
  return std::stod(m[1]);
}

// summary.json's comm_seconds_per_step: rank 0's counted seconds per step of each collective,
// by "axis.kind" ("z.all_gather"). Exits naming `program` when the summary has none.
inline std::map<std::string, double> comm_seconds_per_step(const std::string& program, const std::string& summary) {
  const size_t at = summary.find("\"comm_seconds_per_step\"");
  if (at == std::string::npos) {
    std::fprintf(stderr, "%s: no comm_seconds_per_step in summary.json:\n%s\n", program.c_str(), summary.c_str());
    std::exit(1);
  }
  const std::string object = summary.substr(at, summary.find('}', at) - at);
  const std::regex entry(R"(\"([a-z_.]+)\": ([-0-9.eE+]+))");
  std::map<std::string, double> seconds;
  for (auto it = std::sregex_iterator(object.begin(), object.end(), entry); it != std::sregex_iterator(); ++it)
    seconds[(*it)[1]] = std::stod((*it)[2]);
  return seconds;
}

// `axonn calibrate --quick` on `ranks` ranks with the shapes of <dir>/job.toml, writing
// <dir>/site.toml: the site a benchmark's runs then train with (--site site.toml), so their
// predictions use what this machine measured. Exits, naming `program`, when it fails.
inline void calibrate_quick(const std::string& program, const std::filesystem::path& dir, int ranks) {
  const std::string command = "cd " + dir.string() + " && " + AXONN_BINARY_DIR + "/bin/axonn run -n " +
                              std::to_string(ranks) +
                              " calibrate --quick --max-residual 1 --job job.toml --output site.toml 2>&1";
  int status = 0;
  const std::string output = run_capture(command, status);
  if (status != 0) {
    std::fprintf(stderr, "%s: failed (status %d): %s\n%s\n", program.c_str(), status, command.c_str(), output.c_str());
    std::exit(1);
  }
}

// Trains the job in <dir>/job.toml at its layout (on o.nodes_sim pretend nodes) with
// `overrides` (section.key=value words, and axonn train options such as --site), in fresh
// checkpoint and run folders, and returns its summary.json. Exits, naming `program`,
// when the run fails or its counted bytes differ from the layout model's.
inline std::string run_cpu_job(const std::string& program, const std::filesystem::path& dir, const CpuJob& o,
                               const std::string& overrides) {
  std::filesystem::remove_all(dir / "ckpt");
  std::filesystem::remove_all(dir / "run");
  const std::string command =
      "cd " + dir.string() + " && AXONN_LAYOUT=" + o.layout + " " + AXONN_BINARY_DIR + "/bin/axonn run -n " +
      std::to_string(o.ranks) + (o.nodes_sim > 1 ? " --nodes-sim " + std::to_string(o.nodes_sim) : "") +
      " job.toml training.steps=" + std::to_string(o.steps) + " " + overrides + " run.dir=run 2>&1";
  int status = 0;
  const std::string output = run_capture(command, status);
  if (status != 0) {
    std::fprintf(stderr, "%s: failed (status %d): %s\n%s\n", program.c_str(), status, command.c_str(), output.c_str());
    std::exit(1);
  }
  const std::string summary = read_text(dir / "run" / "summary.json");
  if (summary.find("\"comm_bytes_match\": true") == std::string::npos) {
    std::fprintf(stderr, "%s: counted bytes differ from the layout model:\n%s\n", program.c_str(), summary.c_str());
    std::exit(1);
  }
  return summary;
}

}  // namespace axonn::bench
