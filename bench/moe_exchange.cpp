// The flat and the hierarchical token exchange side by side (docs/moe.md, "The hierarchical
// exchange"): an MoE model on 8 ranks over 2 pretend nodes of 4 at 2x1x4x1e2, where each y
// group is a node and each expert group spans both. Flat, every y rank sends all of its rows
// to the other node; hierarchical, each sends a quarter and the node's y group all-gathers
// them. Prints the bytes between the nodes (expert all-to-all, counted on every rank equal to
// the layout model's, and the whole inter-node tier) and the step time of each, and their
// ratios (goal for the all-to-all's rows: 1/G_y = 1/4 of flat). Capacity factor 1.0.
//   build/bench/bench_moe_exchange [--rounds 3] [--steps 4] [--experts 4] [--top-k 2]
//                                  [--layers 2] [--hidden 256] [--heads 4] [--vocab 256]
//                                  [--sequence 128] [--batch 16] [--micro-batch 16]
// Each setting runs under `axonn run -n 8 --nodes-sim 2` as users run it, alternating in each
// round; per run the median of rank 0's step_s over the steps after the first. Pretend nodes
// share this machine's cores and memory, so the step times show what the exchange costs in
// compute and copies here, not what a real network would save.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
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

const std::string kProgram = "bench_moe_exchange";

struct Setting {
  std::string name;
  std::string layout;
  std::vector<double> step_s;
  int64_t expert_bytes = 0, inter_node_bytes = 0;  // per step, rank 0
  std::string summary;
};


// A predicted (axis, kind) of summary.json, bytes per step (counted equal: run_cpu_job checks).
int64_t predicted_bytes(const std::string& summary, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"" + key + R"(": (\d+))"))) return 0;
  return std::stoll(m[1]);
}

// summary.json's counted bytes per step on the inter-node tier; exits when they differ from
// the prediction.
int64_t inter_node_bytes(const std::string& summary) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex(R"("inter-node": \{"counted": ([-0-9.eE+]+), "predicted": (\d+)\})"))) {
    std::fprintf(stderr, "%s: no inter-node tier in summary.json:\n%s\n", kProgram.c_str(), summary.c_str());
    std::exit(1);
  }
  if (std::stod(m[1]) != std::stod(m[2])) {
    std::fprintf(stderr, "%s: inter-node bytes counted %s, predicted %s\n", kProgram.c_str(), m[1].str().c_str(),
                 m[2].str().c_str());
    std::exit(1);
  }
  return std::stoll(m[2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<OptionSpec> specs = cpu_job_options();
  std::erase_if(specs, [](const OptionSpec& s) { return s.name == "ranks" || s.name == "layout"; });
  CpuJob defaults;
  defaults.ranks = 8;
  defaults.nodes_sim = 2;
  defaults.layout = "2x1x4x1e2";
  defaults.model = {2, 256, 4, 256, 128};
  defaults.batch = 16;
  defaults.micro_batch = 16;
  const bench::MoeCpuJob o = bench::parse_moe_cpu_job(argc, argv, kProgram, specs, defaults, 4);
  const fs::path dir = fs::temp_directory_path() / ("axonn-bench-moe-exchange-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << cpu_job_toml(o.job);
  // A capacity, so every rank's bytes are the model's exactly (dropless, they follow the
  // routing), of 1.0: above it the flat exchange's all-to-all, empty slots included, would
  // carry more rows than the group's tokens, and the group would all-gather them instead.
  const std::string overrides = "model.experts=" + std::to_string(o.experts) +
                                " model.top_k=" + std::to_string(o.top_k) + " model.capacity_factor=1.0";
  std::vector<Setting> settings = {{"flat", "2x1x4x1e2f", {}, 0, 0, {}},
                                   {"hierarchical", "2x1x4x1e2", {}, 0, 0, {}}};
  const ModelShape& m = o.job.model;
  std::printf("flat vs hierarchical token exchange: %d layers, hidden %d, %d heads, sequence %d, %d experts, top-%d, "
              "capacity 1.0; 8 ranks on 2 pretend nodes of 4 at 2x1x4x1e2 (y groups in a node, expert groups "
              "across); batch %d, micro-batch %d; %d rounds, %d steps per run, the first untimed; rank 0\n\n",
              m.layers, m.hidden, m.heads, m.sequence, o.experts, o.top_k, o.job.batch, o.job.micro_batch,
              o.job.rounds, o.job.steps);
  for (int r = 0; r < o.job.rounds; ++r)
    for (Setting& s : settings) {
      CpuJob job = o.job;
      job.layout = s.layout;
      s.summary = run_cpu_job(kProgram, dir, job, overrides);
      s.step_s.push_back(median(per_step_after_first(dir / "run", "step_s")));
      s.expert_bytes = predicted_bytes(s.summary, "expert.all_to_all");
      s.inter_node_bytes = inter_node_bytes(s.summary);
    }

  std::printf("%-13s %-11s %18s %18s %12s %10s\n", "exchange", "layout", "expert a2a B/step", "inter-node B/step",
              "y a2a B/step", "step s");
  for (const Setting& s : settings)
    std::printf("%-13s %-11s %18lld %18lld %12lld %10.4f\n", s.name.c_str(), s.layout.c_str(),
                static_cast<long long>(s.expert_bytes), static_cast<long long>(s.inter_node_bytes),
                static_cast<long long>(predicted_bytes(s.summary, "y.all_to_all")), median(s.step_s));
  const Setting &flat = settings[0], &hier = settings[1];
  // The counts exchange (E float32 per MoE layer and micro-batch) is not split over y.
  ModelShape shape = o.job.model;
  shape.experts = o.experts;
  const BatchSplit split = batch_split(shape, {o.job.batch, o.job.micro_batch}, parse_layout(hier.layout));
  const int64_t counts = int64_t{shape.moe_layers()} * split.accumulation * o.experts * 4;
  std::printf("\nhierarchical / flat: expert all-to-all rows between the nodes %.4f (goal 1/G_y = %.4f), the whole "
              "expert all-to-all %.4f, the inter-node tier %.4f, step time %.3f\n",
              static_cast<double>(hier.expert_bytes - counts) / static_cast<double>(flat.expert_bytes - counts), 0.25,
              static_cast<double>(hier.expert_bytes) / static_cast<double>(flat.expert_bytes),
              static_cast<double>(hier.inter_node_bytes) / static_cast<double>(flat.inter_node_bytes),
              median(hier.step_s) / median(flat.step_s));
  fs::remove_all(dir);
  return 0;
}
