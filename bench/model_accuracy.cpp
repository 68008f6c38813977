// How well the layout chooser's step-time model (layout/layout_cost.hpp) describes this
// machine, before and after `axonn calibrate`, measured side by side in one run:
//   build/bench/bench_model_accuracy [--steps 12] [--rounds 5] [--deciding-pairs 8] [--quick]
//                                    [--max-residual 1] [--keep DIR]
// Two small GPTs, the tiny job's shape and a wider, deeper one, are trained at many layouts
// (every axis alone and mixed) of 1, 2, 4 and 8 ranks under `axonn run`: 4 ranks on one node
// and on 2 pretend nodes (--nodes-sim 2), 8 ranks on 2 pretend nodes. Before a world's runs,
// `axonn calibrate --job` (--quick in a --quick run) measures the machine with that many
// ranks sharing its cores, over the laptop-cpu site, once for each job, as a user calibrates
// for the job they run: its GEMM and attention shapes, and collectives beside its compute (on
// shared cores a collective's price depends on the compute before it, so a site calibrated
// for one job prices another's collectives by the first one's).
//   measured:          the median over --rounds runs of the run's summary.json step_s_median
//                      (each run trained with the calibrated site, --steps steps; a world's
//                      layouts take turns, round after round, so that a slow minute of the
//                      machine falls on one round of several layouts, not on every round of
//                      one); the rounds' spread is printed as the measurement's own noise,
//                      and the odd rounds' median against the even rounds' as the MAPE that
//                      a model exact for one half would score against the other;
//   predicted after:   the run's summary.json predicted_step_s;
//   predicted before:  the same model in this process, for the same job, layout and ranks,
//                      with site_configs/laptop-cpu.toml as written. The in-process price with
//                      the calibrated site must equal the run's, which checks that this is how
//                      `axonn train` prices a run.
//   machine speed:     a shared machine's cores are taken from it for seconds to minutes at a time, so
//                      the machine's speed (machine_speed.hpp: every core's own 256^3 sgemm)
//                      is probed before and after each calibration and each run. Per layout
//                      the runs' speed against the calibration's, and the step at the
//                      calibration's speed (each round's step x that ratio, the median): the
//                      error of the model with the drift between calibrating and training
//                      taken out, printed beside the plain one, which alone has the goals.
// Reported, before and after: per layout the prediction and measured / predicted, and the
// prediction's communication part beside rank 0's seconds inside collectives (summary.json's
// comm_seconds_per_step, which include waiting for the other ranks); over all
// layouts the mean absolute percentage error and Spearman's rank correlation; per group of
// one shape and world, the measured time of the chooser's pick (the layout `axonn run` trains
// when none is given, over every layout of the world) against the fastest measured, and of
// the layout the model ranks first among the listed ones. The calibrated chooser's pick is
// measured with the world's listed layouts where none of them is priced alike (the laptop
// site's may be untried). The calibrated pick's goal is judged round by round against its
// closest rival, the fastest of the group's other layouts (Duel below: the median of the pick's
// step over the rival's in the same round, with the sign test's 90% interval; where the
// rounds leave the interval on both sides of 5%, the two run again back to back, up to
// --deciding-pairs times). Goals: MAPE <= 10%, Spearman >= 0.9, the chooser's pick within 5%
// of the fastest;
// printed as met or MISSED, never asserted (the exit status says only whether everything ran).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_cpu_job.hpp"
#include "bench_stats.hpp"
#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_search.hpp"
#include "layout/layout_volume.hpp"
#include "machine_speed.hpp"
#include "subprocess.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn;
using axonn::bench::Clock;
using axonn::bench::CpuJob;
using axonn::bench::seconds_since;

const std::string kProgram = "bench_model_accuracy";
const std::string kAxonn = std::string(AXONN_BINARY_DIR) + "/bin/axonn";
const std::string kLaptopSite = std::string(AXONN_SOURCE_DIR) + "/site_configs/laptop-cpu.toml";

constexpr double kMapeGoal = 0.10, kSpearmanGoal = 0.9, kPickGoal = 1.05;
// How sure a duel's interval is (bench_stats.hpp's median_interval).
constexpr double kDuelConfidence = 0.9;

// The ranks of one `axonn run` and the pretend nodes they are split over.
struct World {
  int ranks = 1;
  int nodes = 1;
  int ranks_per_node() const { return ranks / nodes; }
  // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on
  // "literal" + std::to_string(...) once this is inlined.
  std::string label() const {  // "4" on one node, "4/2n" on two pretend nodes
    std::string s = std::to_string(ranks);
    if (nodes > 1) s.append("/").append(std::to_string(nodes)).append("n");
    return s;
  }
  std::string words() const {  // "1 rank", "4 ranks on 2 pretend nodes"
    std::string s = std::to_string(ranks);
    s.append(ranks == 1 ? " rank" : " ranks");
    if (nodes > 1) s.append(" on ").append(std::to_string(nodes)).append(" pretend nodes");
    return s;
  }
  bool operator==(const World&) const = default;
};

struct Shape {
  const char* name;
  ModelShape model;
  int batch;  // global batch in sequences
  int micro_batch;
};

// Both well under a second per step on 2 cores. The tiny job's batch 12 divides by data*z up
// to 4 (so 8 ranks need x or y); the wide one's 16 lets 8 ranks be all data.
const Shape kTiny{"tiny", {2, 64, 4, 256, 64}, 12, 4};
const Shape kWide{"wide", {4, 128, 8, 256, 64}, 16, 4};

struct Case {
  const Shape* shape;
  World world;
  // Default rank order (x fastest, data slowest); with its order ("2x1x2x1:xyzd") where the
  // calibrated chooser picked it and it is measured beside the list (with_chooser_picks).
  std::string layout;
  bool quick;  // also in a --quick run
};

const std::vector<Case> kCases = {
    {&kTiny, {1, 1}, "1x1x1x1", true},  {&kTiny, {2, 1}, "2x1x1x1", true},  {&kTiny, {2, 1}, "1x2x1x1", false},
    {&kTiny, {2, 1}, "1x1x2x1", false}, {&kTiny, {2, 1}, "1x1x1x2", true},  {&kTiny, {4, 1}, "4x1x1x1", false},
    {&kTiny, {4, 1}, "2x2x1x1", false}, {&kTiny, {4, 1}, "1x2x2x1", false}, {&kTiny, {4, 1}, "2x1x1x2", false},
    {&kTiny, {4, 1}, "1x1x1x4", false}, {&kTiny, {4, 2}, "4x1x1x1", true},  {&kTiny, {4, 2}, "2x2x1x1", false},
    {&kTiny, {4, 2}, "2x1x1x2", true},  {&kTiny, {8, 2}, "4x2x1x1", false}, {&kTiny, {8, 2}, "2x2x2x1", false},
    {&kTiny, {8, 2}, "2x1x2x2", false}, {&kTiny, {8, 2}, "1x2x2x2", false},

    {&kWide, {1, 1}, "1x1x1x1", true},  {&kWide, {2, 1}, "2x1x1x1", true},  {&kWide, {2, 1}, "1x2x1x1", true},
    {&kWide, {2, 1}, "1x1x2x1", false}, {&kWide, {2, 1}, "1x1x1x2", false}, {&kWide, {4, 1}, "4x1x1x1", false},
    {&kWide, {4, 1}, "2x2x1x1", false}, {&kWide, {4, 1}, "2x1x2x1", false}, {&kWide, {4, 1}, "1x2x1x2", false},
    {&kWide, {4, 1}, "1x1x1x4", false}, {&kWide, {4, 2}, "4x1x1x1", false}, {&kWide, {4, 2}, "2x2x1x1", false},
    {&kWide, {4, 2}, "1x1x2x2", false}, {&kWide, {8, 2}, "8x1x1x1", false}, {&kWide, {8, 2}, "4x2x1x1", false},
    {&kWide, {8, 2}, "2x2x1x2", false}, {&kWide, {8, 2}, "2x1x2x2", false},
};

struct Options {
  int steps = 12;
  int rounds = 5;
  int deciding_pairs = 8;
  bool quick = false;
  double max_residual = 1.0;
  std::optional<std::string> keep;
};

const std::vector<OptionSpec> kOptions = {
    {"steps", true, "training steps of every run (default 12; 4 with --quick)"},
    {"rounds", true,
     "runs of every layout, taking turns; the measured step is their median (default 5; 1 with --quick)"},
    {"deciding-pairs", true,
     "at most this many extra back-to-back runs of the calibrated chooser's pick and its closest rival where "
     "the rounds leave open whether it is within 5% (default 8; 0 with --quick)"},
    {"quick", false, "a smoke run: 8 layouts of 1, 2 and 4 ranks, 5 calibrations (one per world and job)"},
    {"max-residual", true,
     "axonn calibrate --max-residual (default 1: collectives on shared, busy cores are noisy, and the model "
     "takes each fit's best line whatever its residual, which is printed)"},
    {"keep", true, "work in DIR and keep it (job TOMLs, calibrated sites, every run's folder)"},
    {"help", false, "this help"},
};

Options read_options(const Args& args) {
  axonn::bench::no_positionals(args);
  Options o;
  o.quick = args.has("quick");
  o.steps = axonn::bench::count_option(args, "steps", o.quick ? 4 : 12);
  o.rounds = axonn::bench::count_option(args, "rounds", o.quick ? 1 : 5);
  o.deciding_pairs = static_cast<int>(args.integer("deciding-pairs", 0, 1000).value_or(o.quick ? 0 : 8));
  if (o.steps < 2) throw UsageError("--steps " + std::to_string(o.steps) + ": at least 2");
  if (const auto r = args.value("max-residual")) {
    char* end = nullptr;
    o.max_residual = std::strtod(r->c_str(), &end);
    if (end == r->c_str() || *end != '\0' || !(o.max_residual > 0))
      throw UsageError("--max-residual " + *r + ": a positive number");
  }
  o.keep = args.value("keep");
  return o;
}

std::vector<Case> selected_cases(bool quick) {
  std::vector<Case> out;
  std::copy_if(kCases.begin(), kCases.end(), std::back_inserter(out), [&](const Case& c) { return !quick || c.quick; });
  return out;
}

// The worlds of `cases`, in their first-appearance order.
std::vector<World> worlds_of(const std::vector<Case>& cases) {
  std::vector<World> out;
  for (const Case& c : cases)
    if (std::find(out.begin(), out.end(), c.world) == out.end()) out.push_back(c.world);
  return out;
}

CpuJob cpu_job(const Shape& shape) {
  CpuJob job;
  job.model = shape.model;
  job.batch = shape.batch;
  job.micro_batch = shape.micro_batch;
  return job;
}

fs::path job_path(const fs::path& dir, const Shape& shape) { return dir / (std::string(shape.name) + ".toml"); }

// What `axonn train` prices a run of `world` with and chooses its layout from: the chooser's
// input for the site and job at the world's nodes and ranks per node (a CPU job's compute
// rates scaled there to the ranks sharing a node's cores).
ChooserInput run_plan(const SiteConfig& site, const JobConfig& job, const World& world) {
  return chooser_input(site, job, world.nodes, world.ranks_per_node());
}

CostEstimate model_cost(const ChooserInput& plan, const Layout& layout) {
  return estimate_cost(plan, layout, predict_step_volume(plan, layout));
}

// The layout `axonn run` picks for the job on `world` when none is given (and `axonn layout
// --site S --job J --nodes K --gpus-per-node P`): the chooser over every layout of the world.
std::optional<Layout> chooser_pick(const SiteConfig& site, const JobConfig& job, const World& world) {
  const ChooserResult result = choose_layout(run_plan(site, job, world));
  if (!result.fits()) return std::nullopt;
  return result.best().layout;
}

// Whether two layouts are priced alike: the same axis sizes and the same link tier on every
// axis (the chooser keeps one order of those that span the same links).
bool priced_alike(const Layout& a, const Layout& b, const Machine& machine) {
  bool same = a.data == b.data && a.x == b.x && a.y == b.y && a.z == b.z;
  for (int axis = 0; same && axis < kCommAxisCount; ++axis)
    same = axis_link(machine, a, static_cast<CommAxis>(axis)) == axis_link(machine, b, static_cast<CommAxis>(axis));
  return same;
}

// "  overlap -0.21 at 16 KiB, 0.33 at 192 KiB  filled 30%  busy 85%  all_reduce 30 us + 2 GB/s ...": a tier's (or group
// size's) measured figures, the fractions left out where 0.
std::string fits_text(const CollectiveFits& fits, const OverlapCurve& overlap, double filled, double busy) {
  std::string s;
  if (!overlap.empty()) s += "  overlap " + overlap_curve_text(overlap);
  for (const auto& [name, fraction] : {std::pair{"filled", filled}, {"busy", busy}}) {
    if (!(fraction > 0)) continue;
    char buf[48];
    std::snprintf(buf, sizeof buf, "  %s %.0f%%", name, 100 * fraction);
    s += buf;
  }
  for (CollectiveKind kind : kCalibratedKinds) {
    const std::optional<CollectiveFit>& f = fits[static_cast<size_t>(kind)];
    if (!f) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %s %.3g us + %.3g GB/s", collective_name(kind), f->latency_us, f->bandwidth_GBps);
    s += buf;
    if (f->small_max_bytes > 0) {
      std::snprintf(buf, sizeof buf, " (up to %lld B: %.3g us + %.3g GB/s)", static_cast<long long>(f->small_max_bytes),
                    f->small_latency_us, f->small_bandwidth_GBps);
      s += buf;
    }
    if (f->residual) {
      std::snprintf(buf, sizeof buf, " (residual %.2f)", *f->residual);
      s += buf;
    }
  }
  return s;
}

// `axonn calibrate --job` of `shape`'s job (with --quick in a quick run) with the world's ranks
// sharing this machine's cores, over the laptop site; returns the site it wrote. A fit that
// does not converge (other work on the cores bends the times) is measured again, up to three
// tries in all.
fs::path calibrate(const fs::path& dir, const World& world, const Shape& shape, double max_residual, bool quick) {
  const fs::path site = dir / ("site-" + std::string(shape.name) + "-" + std::to_string(world.ranks) + "r" +
                               std::to_string(world.nodes) + "n.toml");
  char residual[32];
  std::snprintf(residual, sizeof residual, "%g", max_residual);
  const std::string command = kAxonn + " run -n " + std::to_string(world.ranks) +
                              (world.nodes > 1 ? " --nodes-sim " + std::to_string(world.nodes) : "") + " calibrate" +
                              (quick ? " --quick" : "") + " --site " + kLaptopSite + " --job " +
                              job_path(dir, shape).string() + " --output " + site.string() + " --max-residual " +
                              residual + " 2>&1";
  std::string output;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const Clock::time_point start = Clock::now();
    int status = 0;
    output = axonn::bench::run_capture(command, status);
    if (status == 0) {
      std::printf("calibrated %s for the %s job in %.1f s%s\n", world.words().c_str(), shape.name, seconds_since(start),
                  attempt > 1 ? (" (try " + std::to_string(attempt) + ")").c_str() : "");
      return site;
    }
    std::fprintf(stderr, "%s: calibrate failed (try %d of 3): %s\n%s\n", kProgram.c_str(), attempt, command.c_str(),
                 output.c_str());
  }
  std::exit(1);
}

// What a calibration changed, per rank of a run of `world`: the GEMM rate and the fitted links.
void print_calibration(const SiteConfig& laptop, const SiteConfig& calibrated, const JobConfig& job, const World& world,
                       const Shape& shape) {
  const Machine before = run_plan(laptop, job, world).machine;
  const Machine after = run_plan(calibrated, job, world).machine;
  std::printf("  GEMM %.1f GFLOP/s per rank over the %s job's shapes (laptop site: %.1f = peak x efficiency)\n",
              after.gemm_flops / 1e9, shape.name, before.peak_flops * before.compute_efficiency / 1e9);
  // A tier the world does not span keeps the base site's figures, which have no fits.
  if (const std::string intra = fits_text(calibrated.intra_node_fits, calibrated.intra_node_overlap,
                                          calibrated.intra_node_filled_by_others, calibrated.intra_node_cores_busy);
      !intra.empty())
    std::printf("  intra-node%s\n", intra.c_str());
  for (const GroupFits& g : calibrated.intra_node_groups)
    std::printf("    groups of %d%s\n", g.ranks,
                fits_text(g.fits, g.overlap, g.filled_by_others, g.cores_busy).c_str());
  if (const std::string inter = fits_text(calibrated.inter_node_fits, calibrated.inter_node_overlap,
                                          calibrated.inter_node_filled_by_others, calibrated.inter_node_cores_busy);
      !inter.empty())
    std::printf("  inter-node%s\n", inter.c_str());
  for (const GroupFits& g : calibrated.inter_node_groups)
    std::printf("    groups of %d%s\n", g.ranks,
                fits_text(g.fits, g.overlap, g.filled_by_others, g.cores_busy).c_str());
}

// The site calibrated for one job at one world.
struct Calibration {
  World world;
  const Shape* shape;
  fs::path path;
  SiteConfig site;
  double machine_flops = 0;  // machine_speed.hpp's probe, the mean of before and after calibrating
};

const Calibration& calibration_of(const std::vector<Calibration>& calibrations, const World& world,
                                  const Shape* shape) {
  return *std::find_if(calibrations.begin(), calibrations.end(),
                       [&](const Calibration& c) { return c.world == world && c.shape == shape; });
}

struct Result {
  Case c;
  std::vector<double> round_s;      // each run's step_s_median, in round order
  std::vector<double> round_speed;  // each run's machine speed / its calibration's (probe before and after)
  double measured_s = 0;            // the median of round_s
  double steady_s = 0;              // the median of round_s x round_speed: the step at the calibration's machine speed
  double before_s = 0, after_s = 0;
  double measured_comm_s = 0;  // summary.json's comm_seconds_per_step, all collectives (the first round's)
  double before_comm_s = 0, after_comm_s = 0;
  // The after prediction's parts: step = compute + comm - hidden - filled (layout_cost.hpp),
  // and the comm that keeps shared cores busy, which neither credit takes off.
  double after_compute_s = 0, after_hidden_s = 0, after_filled_s = 0, after_busy_s = 0;
};

double sum_of(const std::map<std::string, double>& seconds) {
  double total = 0;
  for (const auto& [key, s] : seconds) total += s;
  return total;
}

// Trains one case with the calibrated site and prices it with both sites.
// The machine's speed is probed before and after the run (machine_speed.hpp), as a fraction of
// `calibration_flops`, the speed while the site was calibrated.
Result run_case(const fs::path& dir, const Case& c, int steps, const fs::path& calibrated_site,
                const SiteConfig& laptop, const SiteConfig& calibrated, double calibration_flops) {
  const Layout layout = parse_layout(c.layout);
  const JobConfig job_before = load_job_config(job_path(dir, *c.shape).string(), laptop);
  const JobConfig job_after = load_job_config(job_path(dir, *c.shape).string(), calibrated);
  const ChooserInput plan_before = run_plan(laptop, job_before, c.world);
  const ChooserInput plan_after = run_plan(calibrated, job_after, c.world);
  CpuJob job = cpu_job(*c.shape);
  job.steps = steps;
  job.ranks = c.world.ranks;
  job.nodes_sim = c.world.nodes;
  job.layout = c.layout;
  const fs::path run_dir = dir / (std::string(c.shape->name) + "-" + std::to_string(c.world.ranks) + "r" +
                                  std::to_string(c.world.nodes) + "n-" + c.layout);
  fs::create_directories(run_dir);
  std::ofstream(run_dir / "job.toml") << axonn::bench::cpu_job_toml(job);
  const double speed_before = axonn::bench::machine_flops();
  const std::string summary = axonn::bench::run_cpu_job(kProgram, run_dir, job, "--site " + calibrated_site.string());
  const double speed = 0.5 * (speed_before + axonn::bench::machine_flops());

  Result r;
  r.c = c;
  r.round_s = {axonn::bench::summary_number(kProgram, summary, "step_s_median")};
  r.round_speed = {speed / calibration_flops};
  r.measured_s = r.round_s.front();
  r.after_s = axonn::bench::summary_number(kProgram, summary, "predicted_step_s");
  r.measured_comm_s = sum_of(axonn::bench::comm_seconds_per_step(kProgram, summary));
  const CostEstimate before = model_cost(plan_before, layout), after = model_cost(plan_after, layout);
  r.before_s = before.step_s();
  r.before_comm_s = before.comm_total_s();
  r.after_comm_s = after.comm_total_s();
  r.after_compute_s = after.compute_s;
  r.after_hidden_s = after.hidden_s;
  r.after_filled_s = after.filled_s;
  r.after_busy_s = after.busy_s;
  // The "before" column is only comparable if this process prices as `axonn train` does.
  if (std::abs(after.step_s() - r.after_s) > 1e-4 * r.after_s) {
    std::fprintf(stderr,
                 "%s: %s %s at %s: this process prices %.6g s, axonn train %.6g s; run_plan no longer "
                 "matches train_command.cpp\n",
                 kProgram.c_str(), c.shape->name, c.world.label().c_str(), c.layout.c_str(), after.step_s(), r.after_s);
    std::exit(1);
  }
  return r;
}

// Exits naming the first case whose layout cannot run its job (divisibility, memory), before
// anything is measured.
void check_cases(const fs::path& dir, const std::vector<Case>& cases, const SiteConfig& laptop) {
  for (const Case& c : cases) {
    const ChooserInput plan = run_plan(laptop, load_job_config(job_path(dir, *c.shape).string(), laptop), c.world);
    const Layout layout = parse_layout(c.layout);
    if (layout.world() == c.world.ranks && layout_runs(plan, layout)) continue;
    std::fprintf(stderr, "%s: %s does not run the %s job on %s: %s\n", kProgram.c_str(), c.layout.c_str(),
                 c.shape->name, c.world.words().c_str(), rejection_reason(plan, layout).c_str());
    std::exit(1);
  }
}

// Ranks 1..n of `v`, tied values sharing the mean of their ranks.
std::vector<double> ranks_of(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = static_cast<double>(i + j) / 2.0 + 1.0;
    i = j + 1;
  }
  return rank;
}

// NaN for fewer than two values or when either side is constant.
double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  const double mean_a = std::accumulate(a.begin(), a.end(), 0.0) / n;
  const double mean_b = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += (a[i] - mean_a) * (b[i] - mean_b);
    aa += (a[i] - mean_a) * (a[i] - mean_a);
    bb += (b[i] - mean_b) * (b[i] - mean_b);
  }
  return a.size() < 2 || aa == 0 || bb == 0 ? std::nan("") : ab / std::sqrt(aa * bb);
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  return pearson(ranks_of(a), ranks_of(b));
}

double predicted(const Result& r, bool after) { return after ? r.after_s : r.before_s; }

// Over the results of `shape` (nullptr: all).
double mape(const std::vector<Result>& results, bool after, const Shape* shape = nullptr) {
  double sum = 0;
  int count = 0;
  for (const Result& r : results) {
    if (shape != nullptr && r.c.shape != shape) continue;
    sum += std::abs(predicted(r, after) - r.measured_s) / r.measured_s;
    ++count;
  }
  return count > 0 ? sum / count : std::nan("");
}

// After calibration, against the steps at the calibration's machine speed (Result::steady_s):
// the model's error with the machine's drift between calibrating and training taken out.
double steady_mape(const std::vector<Result>& results) {
  double sum = 0;
  for (const Result& r : results) sum += std::abs(r.after_s - r.steady_s) / r.steady_s;
  return results.empty() ? std::nan("") : sum / static_cast<double>(results.size());
}

// The machine's speed during the runs against during their calibrations, every round of
// every layout: {median, lowest, highest}.
std::array<double, 3> speed_spread(const std::vector<Result>& results) {
  std::vector<double> all;
  for (const Result& r : results) all.insert(all.end(), r.round_speed.begin(), r.round_speed.end());
  if (all.empty()) return {std::nan(""), std::nan(""), std::nan("")};
  return {axonn::bench::median(all), *std::min_element(all.begin(), all.end()),
          *std::max_element(all.begin(), all.end())};
}

// The measured column's own noise: the mean over layouts and rounds of |a round's step − the
// median of the layout's rounds| / that median, what a model exact for every median would
// score against single rounds. NaN with one round.
double round_spread(const std::vector<Result>& results) {
  double sum = 0;
  int count = 0;
  for (const Result& r : results) {
    if (r.round_s.size() < 2) continue;
    for (double s : r.round_s) sum += std::abs(s - r.measured_s) / r.measured_s;
    count += static_cast<int>(r.round_s.size());
  }
  return count > 0 ? sum / count : std::nan("");
}

// The measured column against itself: the mean over layouts of |the median of the odd rounds
// − the median of the even rounds| / the latter, the error of a model that predicted one half
// of the rounds exactly, scored against the other half. A floor for MAPE that the machine's
// own variation within this run sets (a calibration's variation comes on top). NaN with one
// round.
double halves_spread(const std::vector<Result>& results) {
  double sum = 0;
  int count = 0;
  for (const Result& r : results) {
    if (r.round_s.size() < 2) continue;
    std::vector<double> odd, even;  // rounds 1, 3, ... and 2, 4, ...
    for (size_t i = 0; i < r.round_s.size(); ++i) (i % 2 == 0 ? odd : even).push_back(r.round_s[i]);
    const double a = axonn::bench::median(odd), b = axonn::bench::median(even);
    sum += std::abs(a - b) / b;
    ++count;
  }
  return count > 0 ? sum / count : std::nan("");
}

double spearman_of(const std::vector<Result>& results, bool after) {
  std::vector<double> p, m;
  for (const Result& r : results) {
    p.push_back(predicted(r, after));
    m.push_back(r.measured_s);
  }
  return spearman(p, m);
}

void print_table(const std::vector<Result>& results) {
  std::printf(
      "\nmeas/pred.: measured / predicted step (after: summary.json's step_time_ratio); comm pred.: the "
      "prediction's\ncollectives; comm counted: rank 0's seconds per step inside collectives, waiting for the "
      "others included\n");
  std::printf(
      "after's parts: compute, comm, and the comm taken off the step as hidden beside compute and as filled by "
      "other\nranks' compute (step = compute + comm − hidden − filled); busy: the comm that keeps shared cores "
      "busy, which\nneither credit takes off\n");
  std::printf("rounds: (slowest − fastest round) / measured\n");
  std::printf("a layout with its rank order (2x1x2x1:xyzd): the calibrated chooser's pick, measured beside the list\n");
  std::printf(
      "speed: the machine's speed around the runs / around the world's calibration (median of rounds); steady: "
      "each\nround's step x its speed, the step at the calibration's machine speed (median of rounds) / after's "
      "pred.\n");
  const char* header = "%-5s %-5s %-13s %9s %6s | %9s %7s %9s | %9s %7s %9s %8s %8s %8s %8s | %9s | %5s %7s\n";
  std::printf(header, "shape", "ranks", "layout", "measured", "rounds", "before", "meas/", "comm", "after", "meas/",
              "compute", "comm", "hidden", "filled", "busy", "comm", "speed", "steady/");
  std::printf(header, "", "", "", "step s", "", "pred. s", "pred.", "pred. s", "pred. s", "pred.", "s", "s", "s", "s",
              "s", "counted s", "", "pred.");
  for (const Result& r : results) {
    const auto [fastest, slowest] = std::minmax_element(r.round_s.begin(), r.round_s.end());
    std::printf(
        "%-5s %-5s %-13s %9.4f %5.0f%% | %9.4f %7.2f %9.4f | %9.4f %7.2f %9.4f %8.4f %8.4f %8.4f %8.4f | %9.4f | "
        "%5.2f %7.2f\n",
        r.c.shape->name, r.c.world.label().c_str(), r.c.layout.c_str(), r.measured_s,
        100.0 * (*slowest - *fastest) / r.measured_s, r.before_s, r.measured_s / r.before_s, r.before_comm_s, r.after_s,
        r.measured_s / r.after_s, r.after_compute_s, r.after_comm_s, r.after_hidden_s, r.after_filled_s, r.after_busy_s,
        r.measured_comm_s, axonn::bench::median(r.round_speed), r.steady_s / r.after_s);
  }
}

// One shape at one world: the layouts tried there.
struct Group {
  const Shape* shape;
  World world;
  std::vector<const Result*> results;
};

std::vector<Group> groups_of(const std::vector<Result>& results) {
  std::vector<Group> groups;
  for (const Result& r : results) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.shape == r.c.shape && g.world == r.c.world; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{r.c.shape, r.c.world, {}});
    it->results.push_back(&r);
  }
  return groups;
}

double measured_of(const Result& r) { return r.measured_s; }
double before_of(const Result& r) { return r.before_s; }
double after_of(const Result& r) { return r.after_s; }

const Result* lowest(const Group& g, double (*key)(const Result&)) {
  return *std::min_element(g.results.begin(), g.results.end(),
                           [&](const Result* a, const Result* b) { return key(*a) < key(*b); });
}

// The tried layout that is priced as `pick` is (priced_alike).
const Result* tried_as(const Group& g, const Layout& pick, const Machine& machine) {
  for (const Result* r : g.results)
    if (priced_alike(parse_layout(r->c.layout), pick, machine)) return r;
  return nullptr;
}

// "2x1x1x2 1.08x": a layout and its measured step against the fastest's.
std::string pick_text(const std::string& layout, const Result* tried, const Result& fastest) {
  char buf[64];
  if (tried == nullptr)
    std::snprintf(buf, sizeof buf, "%-13s %6s", layout.c_str(), "untried");
  else
    std::snprintf(buf, sizeof buf, "%-13s %5.2fx", layout.c_str(), tried->measured_s / fastest.measured_s);
  return buf;
}

// The calibrated chooser's pick in one group against its closest rival, the fastest of the
// group's other layouts by median, step against step: per round the pick's measured step over
// the rival's in the same round, a ratio that a slow minute of the machine moves less than
// either step alone. The pick is within the goal when the median ratio is; the sign test's
// interval for that median says whether the rounds decide it (the whole interval on one side
// of the goal) or leave it open, as where two layouts priced within a few percent of each
// other swap places from run to run.
struct Duel {
  Case pick, rival;            // of one shape and world
  std::vector<double> ratios;  // pick / rival: the regular rounds', then the deciding pairs'
  int deciding_pairs = 0;

  double median_ratio() const { return axonn::bench::median(ratios); }
  std::optional<std::pair<double, double>> interval() const {
    return axonn::bench::median_interval(ratios, kDuelConfidence);
  }
  bool decided() const {
    const auto i = interval();
    return i && (i->second <= kPickGoal || i->first > kPickGoal);
  }
  bool within() const { return median_ratio() <= kPickGoal; }
};

// The duel of `shape`'s calibrated pick on `world` from the regular rounds of `results` (one
// world's, each with the same rounds); nullopt where the group has one layout or no layout fits.
std::optional<Duel> start_duel(const fs::path& dir, const std::vector<const Result*>& results, const World& world,
                               const Shape* shape, const SiteConfig& calibrated) {
  Group g{shape, world, {}};
  std::copy_if(results.begin(), results.end(), std::back_inserter(g.results),
               [&](const Result* r) { return r->c.shape == shape; });
  const JobConfig job = load_job_config(job_path(dir, *shape).string(), calibrated);
  const std::optional<Layout> chosen = chooser_pick(calibrated, job, world);
  if (g.results.size() < 2 || !chosen) return std::nullopt;
  const Result* pick = tried_as(g, *chosen, run_plan(calibrated, job, world).machine);
  if (pick == nullptr) return std::nullopt;  // with_chooser_picks measures every pick; defensive
  const Result* rival = nullptr;
  for (const Result* r : g.results)
    if (r != pick && (rival == nullptr || r->measured_s < rival->measured_s)) rival = r;
  Duel duel{pick->c, rival->c, {}, 0};
  for (size_t k = 0; k < pick->round_s.size(); ++k) duel.ratios.push_back(pick->round_s[k] / rival->round_s[k]);
  return duel;
}

// Runs the pick and the rival back to back (the rival first every other pair, so that neither
// always follows the other) until the duel is decided or `max_pairs` pairs have run.
void decide(Duel& duel, int max_pairs, const fs::path& dir, int steps, const SiteConfig& laptop,
            const Calibration& calibration) {
  const Case &pick = duel.pick, &rival = duel.rival;
  auto step_of = [&](const Case& c) {
    std::fprintf(stderr, "%s: %s, %s, %s against %s, deciding pair %d of at most %d\n", kProgram.c_str(),
                 pick.shape->name, pick.world.words().c_str(), pick.layout.c_str(), rival.layout.c_str(),
                 duel.deciding_pairs + 1, max_pairs);
    return run_case(dir, c, steps, calibration.path, laptop, calibration.site, calibration.machine_flops)
        .round_s.front();
  };
  while (!duel.decided() && duel.deciding_pairs < max_pairs) {
    const bool rival_first = duel.deciding_pairs % 2 == 1;
    const double first = step_of(rival_first ? rival : pick);
    const double second = step_of(rival_first ? pick : rival);
    duel.ratios.push_back(rival_first ? second / first : first / second);
    ++duel.deciding_pairs;
  }
}

const Duel* duel_of(const std::vector<Duel>& duels, const Group& g) {
  const auto it = std::find_if(duels.begin(), duels.end(),
                               [&](const Duel& d) { return d.pick.shape == g.shape && d.pick.world == g.world; });
  return it == duels.end() ? nullptr : &*it;
}

// Per duel: the rounds it took, the median ratio and its interval, and the verdict.
void print_duels(const std::vector<Duel>& duels) {
  if (duels.empty()) return;
  std::printf(
      "\nthe calibrated chooser's pick against the fastest other layout, round by round (%.0f%% sign-test "
      "interval of the median)\n",
      100 * kDuelConfidence);
  std::printf("%-5s %-5s %-13s %-13s %-7s %-12s %-15s %s\n", "shape", "ranks", "pick", "rival", "rounds", "pick/rival",
              "interval", "verdict");
  for (const Duel& d : duels) {
    const auto i = d.interval();
    char rounds[24], ratio[24], interval[40];
    std::snprintf(rounds, sizeof rounds, "%zu+%d", d.ratios.size() - static_cast<size_t>(d.deciding_pairs),
                  d.deciding_pairs);
    std::snprintf(ratio, sizeof ratio, "%.3fx", d.median_ratio());
    if (i)
      std::snprintf(interval, sizeof interval, "%.3f..%.3fx", i->first, i->second);
    else
      std::snprintf(interval, sizeof interval, "too few rounds");
    std::printf("%-5s %-5s %-13s %-13s %-7s %-12s %-15s %s, %s\n", d.pick.shape->name, d.pick.world.label().c_str(),
                d.pick.layout.c_str(), d.rival.layout.c_str(), rounds, ratio, interval,
                d.within() ? "within 5%" : "NOT within 5%", d.decided() ? "decided" : "undecided");
  }
}

struct PickCount {
  int within = 0, groups = 0, untried = 0;
};

// Before and after calibration: how often the chooser's pick (over every layout of the world,
// as `axonn run` picks) is within the goal of the fastest measured, and how often the lowest
// predicted of the tried layouts is.
struct Picks {
  std::array<PickCount, 2> chooser, lowest;
};

// Per group: the fastest measured, and what the model picks before and after calibration, each
// by its median step. The calibrated chooser's pick is always tried (main adds it to its
// world's layouts), and counted by its duel where it has one; the laptop site's may be untried.
Picks print_picks(const std::vector<Group>& groups, const fs::path& dir, const SiteConfig& laptop,
                  const std::vector<Calibration>& calibrations, const std::vector<Duel>& duels) {
  std::printf("\nper shape and world: measured step of the model's pick / fastest measured\n");
  std::printf("%-5s %-5s %-13s %9s | %-21s %-21s | %-21s %-21s\n", "shape", "ranks", "fastest", "step s",
              "lowest pred. before", "axonn layout before", "lowest pred. after", "axonn layout after");
  Picks count;
  for (const Group& g : groups) {
    if (g.results.size() < 2) continue;  // one layout: nothing to pick
    const Result& fastest = *lowest(g, measured_of);
    const SiteConfig& after_site = calibration_of(calibrations, g.world, g.shape).site;
    std::string columns;
    for (size_t after = 0; after < 2; ++after) {
      const SiteConfig& site = after ? after_site : laptop;
      const JobConfig job = load_job_config(job_path(dir, *g.shape).string(), site);
      const Result* pick = lowest(g, after ? after_of : before_of);
      count.lowest[after].groups += 1;
      count.lowest[after].within += pick->measured_s <= kPickGoal * fastest.measured_s ? 1 : 0;
      const std::optional<Layout> chosen = chooser_pick(site, job, g.world);
      const Result* tried = chosen ? tried_as(g, *chosen, run_plan(site, job, g.world).machine) : nullptr;
      count.chooser[after].groups += 1;
      count.chooser[after].untried += tried == nullptr ? 1 : 0;
      const Duel* duel = after ? duel_of(duels, g) : nullptr;
      const bool within =
          duel != nullptr ? duel->within() : tried != nullptr && tried->measured_s <= kPickGoal * fastest.measured_s;
      count.chooser[after].within += within ? 1 : 0;
      columns += " | " + pick_text(pick->c.layout, pick, fastest) + " " +
                 pick_text(chosen ? format_layout_with_order(*chosen) : "none fits", tried, fastest);
    }
    std::printf("%-5s %-5s %-13s %9.4f%s\n", g.shape->name, g.world.label().c_str(), fastest.c.layout.c_str(),
                fastest.measured_s, columns.c_str());
  }
  return count;
}

// The mean over groups of three or more layouts of Spearman's correlation within the group:
// whether the model orders the layouts of one job and world, which is what the chooser needs
// (over all layouts, bigger jobs and worlds being slower helps any model).
double spearman_within_groups(const std::vector<Group>& groups, bool after) {
  double sum = 0;
  int counted = 0;
  for (const Group& g : groups) {
    if (g.results.size() < 3) continue;
    std::vector<Result> members;
    for (const Result* r : g.results) members.push_back(*r);
    const double rho = spearman_of(members, after);
    if (std::isnan(rho)) continue;
    sum += rho;
    ++counted;
  }
  return counted > 0 ? sum / counted : std::nan("");
}

const char* verdict(bool met) { return met ? "met" : "MISSED"; }

// "0.912", or "-" where there was nothing to correlate (NaN).
std::string correlation_text(double rho) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", rho);
  return std::isnan(rho) ? "-" : buf;
}

void print_goals(const std::vector<Result>& results, const std::vector<Group>& groups, const Picks& picks) {
  std::printf("\n%-44s %-20s %-20s\n", "over all layouts", "before calibration", "after calibration");
  char cell[2][64];
  for (int after = 0; after < 2; ++after) {
    const double e = mape(results, after != 0);
    std::snprintf(cell[after], sizeof cell[after], "%.1f%% %s", 100.0 * e, verdict(e <= kMapeGoal));
  }
  std::printf("%-44s %-20s %-20s\n", "MAPE, goal <= 10%", cell[0], cell[1]);
  for (const Shape* shape : {&kTiny, &kWide}) {
    for (int after = 0; after < 2; ++after)
      std::snprintf(cell[after], sizeof cell[after], "%.1f%%", 100.0 * mape(results, after != 0, shape));
    std::printf("%-44s %-20s %-20s\n", ("  the " + std::string(shape->name) + " job's layouts").c_str(), cell[0],
                cell[1]);
  }
  for (int after = 0; after < 2; ++after) {
    const double rho = spearman_of(results, after != 0);
    std::snprintf(cell[after], sizeof cell[after], "%s %s", correlation_text(rho).c_str(),
                  verdict(rho >= kSpearmanGoal));
  }
  std::printf("%-44s %-20s %-20s\n", "Spearman, goal >= 0.9", cell[0], cell[1]);
  for (int after = 0; after < 2; ++after) {
    const PickCount& p = picks.chooser[static_cast<size_t>(after)];
    const std::string untried = p.untried > 0 ? " (" + std::to_string(p.untried) + " untried)" : "";
    std::snprintf(cell[after], sizeof cell[after], "%d of %d%s %s", p.within, p.groups, untried.c_str(),
                  verdict(p.within == p.groups));
  }
  std::printf("%-44s %-20s %-20s\n", "groups where the chooser's pick is within 5%", cell[0], cell[1]);
  std::printf("%-44s %-20s %-20s\n", "  (before: by the median step; after: duels)", "", "");
  for (int after = 0; after < 2; ++after) {
    const PickCount& p = picks.lowest[static_cast<size_t>(after)];
    std::snprintf(cell[after], sizeof cell[after], "%d of %d", p.within, p.groups);
  }
  std::printf("%-44s %-20s %-20s\n", "  ... the lowest predicted tried one (no goal)", cell[0], cell[1]);
  for (int after = 0; after < 2; ++after)
    std::snprintf(cell[after], sizeof cell[after], "%s",
                  correlation_text(spearman_within_groups(groups, after != 0)).c_str());
  std::printf("%-44s %-20s %-20s\n", "Spearman within a group, mean (no goal)", cell[0], cell[1]);
  if (const double noise = round_spread(results); !std::isnan(noise))
    std::printf("%-44s %.1f%%\n", "a round's step against its median (noise)", 100.0 * noise);
  if (const double halves = halves_spread(results); !std::isnan(halves))
    std::printf("%-44s %.1f%%\n", "odd rounds against even rounds (MAPE floor)", 100.0 * halves);
  const auto [speed, slowest, fastest] = speed_spread(results);
  std::printf("%-44s %.2fx (%.2fx..%.2fx)\n", "machine speed in runs / in their calibration", speed, slowest, fastest);
  std::printf("%-44s %-20s %.1f%%\n", "MAPE at the calibration's machine speed", "", 100.0 * steady_mape(results));
}

// The cases of `world`, and after them, per job, the layout the calibrated chooser picks
// there (what `axonn run` trains when no layout is given) where no case is priced alike, so
// that the pick is measured beside the layouts it was chosen over.
std::vector<Case> with_chooser_picks(const fs::path& dir, const std::vector<Case>& cases, const World& world,
                                     const std::vector<Calibration>& calibrations) {
  std::vector<Case> out;
  std::copy_if(cases.begin(), cases.end(), std::back_inserter(out), [&](const Case& c) { return c.world == world; });
  for (const Shape* shape : {&kTiny, &kWide}) {
    if (std::none_of(out.begin(), out.end(), [&](const Case& c) { return c.shape == shape; })) continue;
    const SiteConfig& site = calibration_of(calibrations, world, shape).site;
    const JobConfig job = load_job_config(job_path(dir, *shape).string(), site);
    const std::optional<Layout> pick = chooser_pick(site, job, world);
    if (!pick) continue;
    const Machine machine = run_plan(site, job, world).machine;
    if (std::any_of(out.begin(), out.end(), [&](const Case& c) {
          return c.shape == shape && priced_alike(parse_layout(c.layout), *pick, machine);
        }))
      continue;
    std::printf("  the calibrated chooser picks %s for the %s job on %s: measured too\n",
                format_layout_with_order(*pick).c_str(), shape->name, world.words().c_str());
    out.push_back({shape, world, format_layout_with_order(*pick), false});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = axonn::bench::parse_bench_args(argc, argv, kOptions, kProgram + " [options]", read_options);
  const fs::path dir = o.keep ? fs::absolute(*o.keep)
                              : fs::temp_directory_path() / ("axonn-bench-model-accuracy-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const Shape* shape : {&kTiny, &kWide})
    std::ofstream(job_path(dir, *shape)) << axonn::bench::cpu_job_toml(cpu_job(*shape));

  const std::vector<Case> cases = selected_cases(o.quick);
  const std::vector<World> worlds = worlds_of(cases);
  const SiteConfig laptop = load_site_config(kLaptopSite);
  check_cases(dir, cases, laptop);
  std::printf(
      "step-time model against measured steps: %zu layouts, %d steps each, %d round%s (axonn run, CPU backend, "
      "Gloo)\n",
      cases.size(), o.steps, o.rounds, o.rounds == 1 ? "" : "s");
  for (const Shape* s : {&kTiny, &kWide})
    std::printf("  %-4s layers %d, hidden %d, heads %d, vocab %d, sequence %d, global batch %d, micro-batch %d\n",
                s->name, s->model.layers, s->model.hidden, s->model.heads, s->model.vocab, s->model.sequence, s->batch,
                s->micro_batch);
  std::printf("before: site laptop-cpu as written (links: intra-node %g us + %g GB/s, inter-node %g us + %g GB/s)\n",
              laptop.intra_node_latency_us, laptop.intra_node_bandwidth_GBps, laptop.inter_node_latency_us,
              laptop.inter_node_bandwidth_GBps);
  std::printf("after: axonn calibrate%s --max-residual %g over it, per world and job (--job)\n\n",
              o.quick ? " --quick" : "", o.max_residual);
  std::fflush(stdout);

  std::vector<Result> results;
  std::vector<Calibration> calibrations;
  std::vector<Duel> duels;
  for (const World& world : worlds) {
    for (const Shape* shape : {&kTiny, &kWide}) {
      if (std::none_of(cases.begin(), cases.end(), [&](const Case& c) { return c.world == world && c.shape == shape; }))
        continue;
      const double speed_before = axonn::bench::machine_flops();
      const fs::path path = calibrate(dir, world, *shape, o.max_residual, o.quick);
      const double speed_after = axonn::bench::machine_flops();
      calibrations.push_back({world, shape, path, load_site_config(path.string()), 0.5 * (speed_before + speed_after)});
      std::printf("  machine (all cores, 256^3 sgemm each) %.1f GFLOP/s before calibrating, %.1f after\n",
                  speed_before / 1e9, speed_after / 1e9);
      print_calibration(laptop, calibrations.back().site, load_job_config(job_path(dir, *shape).string(), laptop),
                        world, *shape);
      std::fflush(stdout);
    }
    const std::vector<Case> world_cases = with_chooser_picks(dir, cases, world, calibrations);
    const size_t first = results.size();
    for (int round = 0; round < o.rounds; ++round) {
      size_t at = first;
      for (const Case& c : world_cases) {
        std::fprintf(stderr, "%s: %s, %s, %s, round %d of %d\n", kProgram.c_str(), c.shape->name, world.words().c_str(),
                     c.layout.c_str(), round + 1, o.rounds);
        const Calibration& calibrated = calibration_of(calibrations, world, c.shape);
        const Result run =
            run_case(dir, c, o.steps, calibrated.path, laptop, calibrated.site, calibrated.machine_flops);
        if (round == 0) {
          results.push_back(run);
        } else {
          results[at].round_s.push_back(run.round_s.front());
          results[at].round_speed.push_back(run.round_speed.front());
        }
        ++at;
      }
    }
    for (size_t i = first; i < results.size(); ++i) {
      Result& r = results[i];
      r.measured_s = axonn::bench::median(r.round_s);
      std::vector<double> steady;
      for (size_t k = 0; k < r.round_s.size(); ++k) steady.push_back(r.round_s[k] * r.round_speed[k]);
      r.steady_s = axonn::bench::median(steady);
    }
    std::vector<const Result*> world_results;
    for (size_t i = first; i < results.size(); ++i) world_results.push_back(&results[i]);
    for (const Shape* shape : {&kTiny, &kWide}) {
      if (std::none_of(world_cases.begin(), world_cases.end(), [&](const Case& c) { return c.shape == shape; }))
        continue;
      const Calibration& calibration = calibration_of(calibrations, world, shape);
      std::optional<Duel> duel = start_duel(dir, world_results, world, shape, calibration.site);
      if (!duel) continue;
      decide(*duel, o.deciding_pairs, dir, o.steps, laptop, calibration);
      duels.push_back(*duel);
    }
  }
  // Worlds ran in order; the table lists one shape's layouts together.
  std::stable_sort(results.begin(), results.end(),
                   [](const Result& a, const Result& b) { return a.c.shape == &kTiny && b.c.shape != &kTiny; });

  print_table(results);
  const std::vector<Group> groups = groups_of(results);
  const Picks picks = print_picks(groups, dir, laptop, calibrations, duels);
  print_duels(duels);
  print_goals(results, groups, picks);
  if (!o.keep) fs::remove_all(dir);
  return 0;
}
