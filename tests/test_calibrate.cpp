// `axonn calibrate` as a user runs it, under the local launcher: the site it writes loads
// with the strict loader and carries what it measured, the tiers follow the topology, and a
// bad input stops it before any rank starts. The fit's own rules (alpha, beta, residual) are
// unit-tested in test_layout.cpp, the writer's round trip in test_config.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <thread>
#include <vector>

#include "config/job_config.hpp"
#include "config/site_config.hpp"
#include "core/number_text.hpp"
#include "layout/alpha_beta_fit.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_volume.hpp"
#include "process_helpers.hpp"
#include "scratch_dir.hpp"

namespace axonn {
namespace {

using test::contains;
using test::kAxonn;
using test::kSourceDir;
using test::run_command;

const std::string kLaptop = kSourceDir + "/site_configs/laptop-cpu.toml";
const std::string kTiny = kSourceDir + "/job_templates/tiny.toml";

// How well a line fits this machine's times is not what these tests can assert: a loaded CI
// machine bends collective times, so the acceptance bound (--max-residual) is opened and a
// sweep whose times fall with the size is run again (run_calibrate). What they assert is that
// calibrate writes what it measured: the lines refitted from the written times, the residual
// recomputed from them, the overlap fractions the log's. The fit's rules (alpha, beta,
// residual, the bound, the split) have their own unit tests in test_layout.cpp.
const std::string kAnyResidual = " --max-residual 100";

class Calibrate : public test::ScratchDirTest {};

// `command` (an axonn calibrate run) up to three times while it stops on a fit that did not
// converge: on the suite's shared cores a quick sweep's times now and then fall with the
// size, and calibrate refuses the negative bandwidth (exit 1, as AFitOverTheResidualBound...
// checks). bench_model_accuracy retries the same way. The last run's result.
test::CommandResult run_calibrate(const std::string& command) {
  test::CommandResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = run_command(command, 240);
    if (r.code != 1 || !contains(r.output, "did not converge")) break;
  }
  return r;
}

size_t kind(CollectiveKind k) { return static_cast<size_t>(k); }

TEST_F(Calibrate, TwoRanksQuickWriteASiteTheStrictLoaderReadsAndTheModelUses) {
  const std::string out = path("calibrated.toml");
  const auto r = run_calibrate("cd " + dir_.string() + " && " + kAxonn + " run -n 2 calibrate --quick --site " +
                                kLaptop + " --job " + kTiny + " --output " + out + kAnyResidual);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "calibrate: wrote " + out)) << r.output;
  EXPECT_TRUE(contains(r.output, "[network.intra_node] all_gather: (absent) -> { latency_us = ")) << r.output;
  EXPECT_TRUE(contains(r.output, "not measured, keys kept from the base site: inter-node: one node")) << r.output;
  EXPECT_TRUE(contains(r.output, "every linear layer of " + kTiny + " at every layout of 2 ranks")) << r.output;

  const SiteConfig base = load_site_config(kLaptop);
  const SiteConfig site = load_site_config(out);
  // Measured: every kind on the one tier two ranks of one node span, GEMMs, AXPY, memory.
  for (const CollectiveKind k : kCalibratedKinds) {
    const auto& fit = site.intra_node_fits[kind(k)];
    ASSERT_TRUE(fit.has_value()) << collective_name(k);
    EXPECT_GE(fit->latency_us, 0) << collective_name(k);
    EXPECT_GT(fit->bandwidth_GBps, 0) << collective_name(k);
    ASSERT_TRUE(fit->residual.has_value()) << collective_name(k);
    EXPECT_FALSE(site.inter_node_fits[kind(k)].has_value()) << collective_name(k);
  }
  EXPECT_EQ(site.intra_node_latency_us, site.intra_node_fits[kind(CollectiveKind::all_reduce)]->latency_us);
  // What the sweep finds depends on this machine's times; what calibrate makes of them does
  // not. Every kind's lines are what fit_piecewise makes of the sweep calibrate wrote, split
  // at the communicator's own switch (GlooSyncCollectives::largest_taken on 2 ranks: the sync
  // pairs take an all-reduce up to 1 MiB and Gloo's ring the larger; the others' switch is at
  // 2 MiB). Whether two lines fit (each side needs two sizes and a converging line) is this
  // machine's to decide, and fit_piecewise's unit tests check that rule on synthetic times;
  // here the split, when made, is at the switch and nowhere else, and the written residual is
  // the lines' RMS relative error over the written times, recomputed by hand below.
  for (const CollectiveKind k : kCalibratedKinds) {
    const CollectiveFit& fit = *site.intra_node_fits[kind(k)];
    ASSERT_TRUE(fit.measured.has_value()) << collective_name(k);
    const double switch_bytes = k == CollectiveKind::all_reduce ? 1 << 20 : 2 << 20;
    std::vector<CollectiveSample> samples;
    for (const SweepPoint& p : fit.measured->points) samples.push_back({p.bytes, p.seconds});
    const PiecewiseFit refit = fit_piecewise(k, LinkTier::intra_node, 2, samples, switch_bytes, 100);
    EXPECT_EQ(fit.small_max_bytes, static_cast<int64_t>(refit.small_max_bytes)) << collective_name(k);
    EXPECT_NEAR(fit.latency_us, refit.fit.latency_s * 1e6, 1e-9 + 1e-9 * fit.latency_us) << collective_name(k);
    EXPECT_NEAR(fit.bandwidth_GBps, refit.fit.bandwidth_bytes_per_s / 1e9, 1e-9 * fit.bandwidth_GBps)
        << collective_name(k);
    double squares = 0;
    for (const SweepPoint& p : fit.measured->points) {
      const bool small = p.bytes <= static_cast<double>(fit.small_max_bytes);
      const double latency_s = (small ? fit.small_latency_us : fit.latency_us) * 1e-6;
      const double bytes_per_s = (small ? fit.small_bandwidth_GBps : fit.bandwidth_GBps) * 1e9;
      // Groups of 2: all-reduce 2 messages and bus factor 1, the others 1 and 1/2.
      const bool reduce = k == CollectiveKind::all_reduce;
      const double line = (reduce ? 2 : 1) * latency_s + (reduce ? 1.0 : 0.5) * p.bytes / bytes_per_s;
      squares += (p.seconds - line) * (p.seconds - line) / (p.seconds * p.seconds);
    }
    const double residual = std::sqrt(squares / static_cast<double>(fit.measured->points.size()));
    EXPECT_NEAR(*fit.residual, residual, 1e-6 + 1e-6 * residual) << collective_name(k);
  }
  // The overlap probe ran on the tier at the smallest and the largest size the tiny job
  // overlaps at 2 ranks and wrote a fraction for each: hidden, or (below 0, as on 2 CPU ranks
  // that fill 2 cores) the extra that overlap costs there. Which one is this machine's; the
  // file holds the fraction the log gives for that size.
  const std::vector<OverlapPoint>& points = site.intra_node_overlap.points;
  ASSERT_EQ(points.size(), 2u) << r.output;
  EXPECT_LT(points[0].bytes, points[1].bytes);
  size_t hidden = 0;
  EXPECT_TRUE(contains(r.output, "  overlap, 4 of each in a row, per call: ")) << r.output;
  for (const OverlapPoint& p : points) {
    const std::string verdict = p.fraction >= 0
                                    ? format_number("%.0f%%", 100 * p.fraction) + " of the all-reduce hidden"
                                    : "the all-reduce cost " + format_number("%.0f%%", -100 * p.fraction) +
                                          " of its time more than waited for after them";
    EXPECT_TRUE(std::regex_search(r.output, std::regex("all_reduce of " + bytes_text(p.bytes) + " [^\\n]*" + verdict)))
        << bytes_text(p.bytes) << " fraction " << p.fraction << "\n" << r.output;
    hidden += p.fraction >= 0 ? 1 : 0;
  }
  EXPECT_EQ(test::occurrences(r.output, "of the all-reduce hidden (median of the rounds)"), hidden) << r.output;
  EXPECT_EQ(contains(r.output, "overlap costs at some sizes on this tier"), hidden < points.size()) << r.output;
  EXPECT_GT(site.gemm_tflops_float32, 0);
  EXPECT_EQ(site.gemm_tflops_bfloat16, 0);
  EXPECT_GT(site.attention_tflops_float32, 0);
  EXPECT_TRUE(contains(r.output, "  attention 1/")) << r.output;
  // Collectives are timed as training meets them: each after a GEMM of the job on every rank.
  EXPECT_TRUE(contains(r.output, "each timed collective follows one forward GEMM m=")) << r.output;
  EXPECT_GT(site.elementwise_GBps, 0);
  EXPECT_GT(site.memory_gib, 0);
  ASSERT_FALSE(site.gemm.empty());
  for (const SiteGemm& g : site.gemm) EXPECT_EQ(g.dtype, ElementType::float32);
  // Kept: what was not measured.
  EXPECT_EQ(site.name, base.name);
  EXPECT_EQ(site.peak_tflops_float32, base.peak_tflops_float32);
  EXPECT_EQ(site.inter_node_bandwidth_GBps, base.inter_node_bandwidth_GBps);
  EXPECT_EQ(site.inter_node_latency_us, base.inter_node_latency_us);
  EXPECT_EQ(site.signal_lead_s, base.signal_lead_s);
  EXPECT_EQ(site.memory_headroom, base.memory_headroom);
  // Where and how.
  ASSERT_TRUE(site.calibration.present());
  EXPECT_EQ(site.calibration.ranks, 2);
  EXPECT_EQ(site.calibration.ranks_per_node, 2);
  EXPECT_EQ(site.calibration.hosts.size(), 1u);
  EXPECT_FALSE(site.calibration.axonn_version.empty());
  EXPECT_TRUE(contains(site.calibration.device, "collectives gloo")) << site.calibration.device;

  // The layout model prices the tiny job's z collectives at 1x1x1x2 by the fits, and its
  // GEMMs at the measured rates of their shapes, which calibrate measured for this layout.
  const JobConfig job = load_job_config(kTiny, site);
  const ChooserInput in = chooser_input(site, job, 1, 2);
  const Layout l = parse_layout("1x1x1x2");
  for (const GemmShape& s : local_gemm_shapes(in, l)) {
    const bool listed = std::any_of(in.machine.gemm_rates.begin(), in.machine.gemm_rates.end(),
                                    [&](const GemmRate& rate) { return rate.shape == s; });
    EXPECT_TRUE(listed) << s.m << "x" << s.k << "x" << s.n;
  }
  // A call within the swept sizes is priced by the sweep calibrate wrote (measured on groups
  // of 2, every swept size listed), every other by the lines.
  const StepVolume v = predict_step_volume(in, l);
  double want = 0;  // groups of 2: ring_steps 2 for all-reduce, 1 for the others; bus factor 1 and 1/2
  for (const CollectiveCalls& calls : v.calls) {
    if (calls.axis != CommAxis::z) continue;
    const CollectiveFit& fit = *site.intra_node_fits[kind(calls.kind)];
    ASSERT_TRUE(fit.measured);
    EXPECT_EQ(fit.measured->ranks, 2);
    EXPECT_EQ(fit.measured->points.front().bytes, 4096);
    const auto bytes = static_cast<double>(calls.bytes);
    if (const std::optional<double> swept = fit.measured->seconds_at(bytes, 2)) {
      want += static_cast<double>(calls.calls) * *swept;
      continue;
    }
    const bool small = calls.bytes <= fit.small_max_bytes;
    const double latency_us = small ? fit.small_latency_us : fit.latency_us;
    const double bandwidth_GBps = small ? fit.small_bandwidth_GBps : fit.bandwidth_GBps;
    const bool reduce = calls.kind == CollectiveKind::all_reduce;
    want += static_cast<double>(calls.calls) * ((reduce ? 2 : 1) * latency_us * 1e-6 +
                                                (reduce ? 1 : 0.5) * static_cast<double>(calls.bytes) /
                                                    (bandwidth_GBps * 1e9));
  }
  EXPECT_GT(v.at(CommAxis::z, CollectiveKind::all_gather).calls, 0);
  const double z_s = estimate_cost(in, l, v).comm_s[static_cast<size_t>(CommAxis::z)];
  EXPECT_NEAR(z_s, want, 1e-9 * want);

  // And the file is a site config every command takes.
  const auto layout =
      run_command(kAxonn + " layout --site " + out + " --job " + kTiny + " --nodes 1 --gpus-per-node 2");
  EXPECT_EQ(layout.code, 0) << layout.output;
}

// Two pretend nodes of one rank each: no intra-node tier, and inter-node is measured (over
// loopback here, over the network under srun -N 2).
TEST_F(Calibrate, TiersFollowTheTopology) {
  const std::string out = path("nodes.toml");
  const auto r =
      run_calibrate(kAxonn + " run -n 2 --nodes-sim 2 calibrate --quick --tiers inter-node --output " + out + kAnyResidual);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "not measured, keys kept from the base site: intra-node: one rank per node"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "3 GEMM shape(s) in float32, square")) << r.output;
  const SiteConfig site = load_site_config(out);
  EXPECT_TRUE(site.inter_node_fits[kind(CollectiveKind::reduce_scatter)].has_value());
  EXPECT_FALSE(site.intra_node_fits[kind(CollectiveKind::reduce_scatter)].has_value());
  EXPECT_EQ(site.intra_node_bandwidth_GBps, load_site_config(kLaptop).intra_node_bandwidth_GBps);
  EXPECT_EQ(site.calibration.hosts.size(), 2u);
  EXPECT_TRUE(site.gemm.empty()) << "square GEMMs are no job's shapes: only gemm_tflops_float32";
  EXPECT_GT(site.gemm_tflops_float32, 0);
}

// Four ranks on two pretend nodes: the inter-node tier is measured on groups of one rank per
// node and again, on a grid of its own, on groups of both ranks of every node (4); the
// intra-node tier's only group size is its probe's (2). The written site keeps both, and the
// model prices the data all-reduce of 4 ranks by the second.
TEST_F(Calibrate, OtherGroupSizesAreMeasuredOnGridsOfTheirOwn) {
  const std::string out = path("groups.toml");
  const auto r = run_calibrate(kAxonn + " run -n 4 --nodes-sim 2 calibrate --quick --output " + out + kAnyResidual);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "inter-node on groups of 4: grid 4x1x1x1")) << r.output;
  const SiteConfig site = load_site_config(out);
  EXPECT_TRUE(site.intra_node_groups.empty());
  ASSERT_EQ(site.inter_node_groups.size(), 1u);
  EXPECT_EQ(site.inter_node_groups[0].ranks, 4);
  for (const CollectiveKind k : kCalibratedKinds) {
    ASSERT_TRUE(site.inter_node_groups[0].fits[kind(k)].has_value()) << collective_name(k);
    EXPECT_GT(site.inter_node_groups[0].fits[kind(k)]->bandwidth_GBps, 0) << collective_name(k);
    EXPECT_TRUE(site.inter_node_groups[0].fits[kind(k)]->residual.has_value()) << collective_name(k);
  }
  // Where the 4 ranks outnumber this machine's cores (the CI's 2), every tier and group size
  // is also timed for what other ranks compute through; where they do not, nothing is.
  const bool shared = std::thread::hardware_concurrency() < 4;
  EXPECT_EQ(contains(r.output, "4 ranks share this host's"), shared) << r.output;
  EXPECT_EQ(contains(r.output, "of the all-reduces filled by other ranks' compute"), shared) << r.output;
  for (const double filled : {site.intra_node_filled_by_others, site.inter_node_filled_by_others,
                              site.inter_node_groups[0].filled_by_others}) {
    EXPECT_GE(filled, 0);
    EXPECT_LE(filled, shared ? 1 : 0);
  }
  // ... and for the cores the collectives keep busy: a call always runs on a core for a while.
  EXPECT_EQ(contains(r.output, "of the cores busy"), shared) << r.output;
  for (const double busy :
       {site.intra_node_cores_busy, site.inter_node_cores_busy, site.inter_node_groups[0].cores_busy}) {
    if (shared) {
      EXPECT_GT(busy, 0);
    }
    EXPECT_LE(busy, shared ? 1 : 0);
  }
  const auto layout = run_command(kAxonn + " layout --site " + out + " --job " + kTiny +
                                  " --nodes 2 --gpus-per-node 2 --explain");
  EXPECT_EQ(layout.code, 0) << layout.output;
  EXPECT_TRUE(contains(layout.output, "measured inter-node all_reduce on groups of 4: alpha")) << layout.output;
}

// A fit calibrate cannot accept: exit 1, said once (by rank 0), naming the collective and the
// tier and what to try, and no file written.
TEST_F(Calibrate, AFitOverTheResidualBoundFailsNamingItAndWritesNothing) {
  const std::string out = path("never.toml");
  const auto r = run_command(kAxonn + " run -n 2 calibrate --quick --max-residual 0.000001 --output " + out, 240);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "[0] axonn calibrate: the all_reduce fit over intra-node links (groups of 2) did not "
                       "converge"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "--max-residual")) << r.output;
  EXPECT_FALSE(contains(r.output, "[1] axonn calibrate:")) << "one rank says it\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Bad inputs: exit 2 with one line, before any rank starts (no "[rank]" output).
TEST_F(Calibrate, BadInputsStopBeforeAnyRankStarts) {
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"run -n 2 calibrate --quick", "--output SITE.toml is required"},
      {"run -n 2 calibrate --output " + path("no-such-folder/x.toml"), "does not exist"},
      {"run -n 2 calibrate --output " + dir_.string(), "is a folder"},
      {"run -n 1 calibrate --tiers intra-node --output " + path("x.toml"),
       "--tiers asks for intra-node links, which this allocation cannot measure: one rank per node"},
      {"run -n 2 calibrate --tiers inter-node --output " + path("x.toml"),
       "--tiers asks for inter-node links, which this allocation cannot measure: one node; run on at least 2 nodes"},
      {"run -n 2 calibrate --tiers intra-node,infiniband --output " + path("x.toml"),
       "'infiniband' is not a link tier"},
      {"run -n 2 calibrate --max-residual -1 --output " + path("x.toml"), "--max-residual -1: expected a number"},
      {"run -n 2 calibrate --job " + path("missing.toml") + " --output " + path("x.toml"), "missing.toml"},
      {"run -n 2 calibrate " + kTiny + " --output " + path("x.toml"), "name the job with --job"},
      // Outside any launcher the same checks come first, before PMIx is asked for.
      {"calibrate --quick", "--output SITE.toml is required"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(kAxonn + " " + c.args, 60);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.expected)) << c.args << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "[0]")) << c.args << ": a rank started\n" << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(path("x.toml")));
}

}  // namespace
}  // namespace axonn
