// How much of the expert all-to-all the pipelined rounds (model.moe_chunks; docs/moe.md,
// "Pipelined rounds") hide behind the experts' GEMMs, measured side by side on this machine:
//   build/bench/bench_moe_overlap [--rounds 3] [--steps 4] [--ranks 4] [--layout 4x1x1x1e2]
//                                 [--experts 8] [--top-k 2] [--layers 2] [--hidden 256] ...
// The same MoE job (dropless) runs under `axonn run -n <ranks>` with the exchange whole
// (moe_chunks = 1), in 2 and E_l rounds, and at moe_chunks = "auto" (the rounds the layout
// model predicts fastest, as summary.json's moe_rounds reports), alternating, `rounds` times
// each; a run's step
// time is the median of rank 0's step_s over its steps after the first. What the rounds can
// hide is the expert all-to-all's counted time per step in the whole-exchange runs
// (summary.json, comm_seconds_per_step), and
//   hidden fraction = (step_whole - step_rounds) / that time
// (1: all of it left the step; 0: none; below 0: the rounds cost more than they hid). Beside
// it, the layout model's predicted step (summary.json), which hides the overlapped rounds at
// the site's measured overlap (none on the built-in site: it then prices only the extra calls). CPU
// ranks on loopback: the "network" is the cores the GEMMs use, and Gloo moves the bytes on
// the communicator's thread, so this bounds what a rank gains where a NIC or NVLink moves them.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "bench_cpu_job.hpp"
#include "layout/model_plan.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn;
using axonn::bench::CpuJob;
using axonn::bench::median;

const std::string kProgram = "bench_moe_overlap";

struct Setting {
  int chunks = 1;  // ModelShape::kAutoMoeChunks: "auto"
  int64_t auto_rounds = 0;  // what "auto" ran in (summary.json moe_rounds)
  std::vector<double> step_s, a2a_s;  // per run: median step, counted expert all-to-all seconds per step
  double predicted_step_s = 0;       // the layout model's (summary.json)
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<OptionSpec> specs = bench::cpu_job_options();
  CpuJob defaults;
  defaults.ranks = 4;
  defaults.layout = "4x1x1x1e2";
  defaults.model = {2, 256, 4, 256, 128};
  defaults.batch = 16;
  defaults.micro_batch = 4;
  const bench::MoeCpuJob o = bench::parse_moe_cpu_job(argc, argv, kProgram, specs, defaults, 8);
  ModelShape shape = o.job.model;
  shape.experts = o.experts;
  shape.top_k = o.top_k;
  const Layout layout = parse_layout(o.job.layout);
  const MoeShape most = moe_shape(shape, batch_split(shape, {o.job.batch, o.job.micro_batch}, layout), layout);
  if (most.max_rounds < 2) {
    std::fprintf(stderr,
                 "%s: layout %s with %d experts has no pipelined rounds (they need E_p > 1, E_l >= 2, G_x = G_y = 1 "
                 "and the all-to-all); try --layout 4x1x1x1e2 --experts 8\n",
                 kProgram.c_str(), o.job.layout.c_str(), o.experts);
    return 2;
  }
  std::vector<Setting> settings = {{1, 0, {}, {}}};
  if (most.max_rounds > 2) settings.push_back({2, 0, {}, {}});
  settings.push_back({static_cast<int>(most.max_rounds), 0, {}, {}});
  settings.push_back({ModelShape::kAutoMoeChunks, 0, {}, {}});

  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-moe-overlap-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << bench::cpu_job_toml(o.job);
  const ModelShape& m = o.job.model;
  std::printf("expert all-to-all in pipelined rounds: %d layers, hidden %d, sequence %d, %d experts, top-%d, dropless; "
              "%d ranks at %s (E_l = %lld); batch %d, micro-batch %d; %d rounds, %d steps per run, the first untimed; "
              "rank 0\n\n",
              m.layers, m.hidden, m.sequence, o.experts, o.top_k, o.job.ranks, o.job.layout.c_str(),
              static_cast<long long>(most.local_experts), o.job.batch, o.job.micro_batch, o.job.rounds, o.job.steps);
  for (int r = 0; r < o.job.rounds; ++r)
    for (Setting& s : settings) {
      const std::string chunks = s.chunks == ModelShape::kAutoMoeChunks ? "auto" : std::to_string(s.chunks);
      const std::string overrides = "model.experts=" + std::to_string(o.experts) + " model.top_k=" +
                                    std::to_string(o.top_k) + " model.moe_chunks=" + chunks;
      const std::string summary = bench::run_cpu_job(kProgram, dir, o.job, overrides);
      s.step_s.push_back(median(bench::per_step_after_first(dir / "run", "step_s")));
      const std::map<std::string, double> seconds = bench::comm_seconds_per_step(kProgram, summary);
      const auto it = seconds.find("expert.all_to_all");
      s.a2a_s.push_back(it == seconds.end() ? 0.0 : it->second);
      std::smatch predicted;
      if (std::regex_search(summary, predicted, std::regex(R"("predicted_step_s": ([-0-9.eE+]+))")))
        s.predicted_step_s = std::stod(predicted[1]);
      std::smatch rounds;
      if (std::regex_search(summary, rounds, std::regex(R"("moe_rounds": ([0-9]+))")))
        s.auto_rounds = std::stoll(rounds[1]);
    }

  const Setting& whole = settings.front();
  const double step_whole = median(whole.step_s), a2a_whole = median(whole.a2a_s);
  std::printf("%-8s %10s %22s %16s %10s %13s\n", "rounds", "step s", "expert a2a s/step", "hidden fraction",
              "speedup", "predicted s");
  for (const Setting& s : settings) {
    const double step = median(s.step_s);
    std::string name = std::to_string(s.chunks);
    if (s.chunks == ModelShape::kAutoMoeChunks) {
      name = "auto: ";
      name += std::to_string(s.auto_rounds);
    }
    if (s.chunks == 1)
      std::printf("%-8s %10.4f %22.4f %16s %10s %13.4f\n", name.c_str(), step, median(s.a2a_s), "-", "-",
                  s.predicted_step_s);
    else
      std::printf("%-8s %10.4f %22.4f %15.1f%% %9.3fx %13.4f\n", name.c_str(), step, median(s.a2a_s),
                  100.0 * (step_whole - step) / a2a_whole, step_whole / step, s.predicted_step_s);
  }
  std::printf("\nhidden fraction = (step with the whole exchange - step in rounds) / the whole exchange's expert "
              "all-to-all seconds per step (%.4f s, %.1f%% of its step)\n",
              a2a_whole, 100.0 * a2a_whole / step_whole);
  fs::remove_all(dir);
  return 0;
}
