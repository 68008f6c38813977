// axonn calibrate --output SITE.toml [--site BASE.toml] [--job J.toml] [--quick] [--tiers LIST] [--max-residual R]
// Measures this site's figures on the job's ranks, under `axonn run -n N` or `srun --mpi=pmix`,
// with the backend and communicators the trainer uses (cli/train_device.hpp: the CPU backend
// and Gloo, or the CUDA backend and NCCL), and writes the base site with them in place of its
// guesses (docs/site-admin.md, "Calibrating a site"):
//   - GEMM rate per rank at the shapes the layout model prices (cli/calibrate_gemm.hpp), all
//     ranks at once; attention's rate at the job's shapes; the elementwise rate of a block's
//     LayerNorms, biases and GELU; memory per rank;
//   - per link tier this allocation spans (cli/calibrate_links.hpp) and per collective kind the
//     trainer uses, alpha and beta fitted to the times of 4 KiB .. 256 MiB messages
//     (layout/alpha_beta_fit.hpp), with each fit's residual.
// Rank 0 says what it measures on stderr, then writes --output and prints what changed
// against the base site and which tiers were not measured (their keys kept). A fit that does
// not converge fails every rank with exit 1, naming the collective, the tier and what to try.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "comm/comm_grid.hpp"
#include "config/site_writer.hpp"
#include "core/exit_codes.hpp"
#include "core/median.hpp"
#include "core/number_text.hpp"
#include "core/wall_clock.hpp"
#include "layout/alpha_beta_fit.hpp"
#include "runner/calibrate/calibrate_gemm.hpp"
#include "runner/calibrate/calibrate_inputs.hpp"
#include "runner/calibrate/calibrate_links.hpp"
#include "runner/calibrate/mean_seconds.hpp"
#include "runner/cli/args.hpp"
#include "runner/cli/commands.hpp"
#include "runner/cli/environment.hpp"
#include "runner/cli/report_error.hpp"
#include "runner/cli/train_device.hpp"
#include "runner/pmix/topology.hpp"
#include "version.hpp"

namespace axonn {
namespace {

// Progress on stderr, rank 0 only (the others measure the same at the same time).
void say(bool lead, const std::string& line) {
  if (!lead) return;
  std::fprintf(stderr, "calibrate: %s\n", line.c_str());
  std::fflush(stderr);
}

// Every rank's `mine` (the same length on every rank), as [rank][i]: one all-gather over the
// world, through device buffers where the collectives take them (NCCL). Float32 is plenty
// for times and rates (7 digits).
std::vector<std::vector<double>> gather_all(Communicator& world, Backend& backend, const std::vector<double>& mine) {
  const size_t n = mine.size();
  const std::vector<float> values(mine.begin(), mine.end());
  DeviceBuffer<float> in(backend, values), out(backend, n * static_cast<size_t>(world.size()));
  world.all_gather(in.data(), out.data(), n, ElementType::float32);
  world.synchronize();
  const std::vector<float> all = out.download();
  std::vector<std::vector<double>> by_rank(static_cast<size_t>(world.size()));
  for (size_t r = 0; r < by_rank.size(); ++r) by_rank[r].assign(all.begin() + r * n, all.begin() + (r + 1) * n);
  return by_rank;
}

// The median over ranks of each column of gather_all's answer.
std::vector<double> median_over_ranks(const std::vector<std::vector<double>>& by_rank) {
  std::vector<double> out;
  for (size_t i = 0; i < by_rank.front().size(); ++i) {
    std::vector<double> column;
    for (const auto& row : by_rank) column.push_back(row[i]);
    out.push_back(median(column));
  }
  return out;
}

// Where ranks share the cores, what calibrate measured of it on a tier's groups.
struct Sharing {
  double filled_by_others = 0;  // the time-sharing probe's: of its blocking calls, what others' compute went through
  double cores_busy = 0;        // the sweeps' cores_busy_fraction: the cores the calls themselves kept busy
};

// What the ranks measured, already combined over ranks (the same on every rank).
struct Measured {
  std::vector<SiteGemm> gemm;
  double gemm_tflops = 0;
  GemmShape typical_gemm;                       // the compute each timed collective follows
  // The overlap probe's all-reduces, ascending (overlap_probe_sizes); the time-sharing probe
  // uses the largest.
  std::vector<double> overlap_sizes;
  double attention_tflops = 0;
  double elementwise_GBps = 0;
  double memory_gib = 0;
  struct TierLinks {
    TierProbe probe;
    CollectiveFits fits;
    OverlapCurve overlap;         // overlap_fraction of the tier's probe at each of overlap_sizes
    Sharing sharing;              // 0 where cores are not shared
  };
  std::vector<TierLinks> links;
  struct TierGroup {
    LinkTier tier;
    GroupFits fits;
  };
  std::vector<TierGroup> groups;  // the plan's other group sizes
};

// How calibrate connects its grids.
struct GridOptions {
  std::chrono::milliseconds timeout;
  bool single_host = false;
  CommBackend collectives = CommBackend::gloo;
};

// This rank's values -> each one's median over every rank of the grid (the same on every rank).
std::vector<double> over_ranks(CommGrid& grid, Backend& backend, const std::vector<double>& mine) {
  return median_over_ranks(gather_all(grid.world(), backend, mine));
}

Measured measure_compute(CommGrid& grid, Backend& backend, const CalibrateInputs& in, const Topology& topo,
                         const TrainDevice& device, ElementType dtype, double share, bool lead) {
  std::optional<ChooserInput> job;
  if (in.job) job = chooser_input(in.site.config, *in.job, topo.nodes, topo.uniform_tasks_per_node());
  const std::vector<GemmShape> shapes = calibration_gemm_shapes(job, topo.world, in.quick);
  say(lead, std::to_string(shapes.size()) + " GEMM shape(s) in " + element_type_name(dtype) +
                (in.job ? ", every linear layer of " + in.job->source + " at every layout of " +
                              std::to_string(topo.world) + " ranks"
                        : ", square") +
                "; all " + std::to_string(topo.world) + " ranks at once");
  const std::vector<AttentionShape> attention = calibration_attention_shapes(job, topo.world, in.quick);
  // The node's ranks compute together, as in training, from the barrier to their windows' end;
  // the GEMM shapes, the attention shapes and the elementwise probe in turns, kTimingPasses
  // times (median_over_passes).
  const auto together = [&] { grid.world().barrier(); };
  const double window_s = compute_window_seconds(in.quick);
  const ElementwiseProbe probe = elementwise_probe(job, dtype, device.cuda);
  const size_t first_attention = shapes.size(), elementwise = first_attention + attention.size();
  say(lead, "each shape and the elementwise probe timed for " + format_number("%g", window_s) + " s, " +
                std::to_string(kTimingPasses) + " times in turns; the median");
  std::vector<double> mine = median_over_passes(elementwise + 1, kTimingPasses, [&](size_t i) {
    if (i < first_attention) return time_linear_gemms(backend, dtype, shapes[i], window_s, together);
    if (i < elementwise) return time_attention(backend, dtype, attention[i - first_attention], window_s, together);
    return time_elementwise(backend, dtype, probe, window_s, together);
  });
  for (size_t i = 0; i < shapes.size(); ++i) {
    const GemmShape& s = shapes[i];
    say(lead, "  GEMM " + std::to_string(i + 1) + "/" + std::to_string(shapes.size()) + " m=" + std::to_string(s.m) +
                  " k=" + std::to_string(s.k) + " n=" + std::to_string(s.n) + ": " +
                  format_number("%.3g", linear_flops(s) / mine[i] / 1e9) + " GFLOP/s on rank 0");
  }
  for (size_t i = 0; i < attention.size(); ++i) {
    const AttentionShape& a = attention[i];
    say(lead, "  attention " + std::to_string(i + 1) + "/" + std::to_string(attention.size()) +
                  " micro-batch=" + std::to_string(a.batch) + " T=" + std::to_string(a.sequence) +
                  " heads=" + std::to_string(a.heads) + " d=" + std::to_string(a.head_size) + ": " +
                  format_number("%.3g", attention_flops(a) / mine[first_attention + i] / 1e9) + " GFLOP/s on rank 0");
  }
  say(lead, "  elementwise (a block's LayerNorms, biases and GELU, " + std::to_string(probe.rows) + " rows of " +
                std::to_string(probe.width) + "): " + format_number("%.3g", probe.bytes / mine[elementwise] / 1e9) +
                " GB/s on rank 0");
  mine.push_back(rank_memory_bytes(device.cuda, device.gpu, in.site.config.gpus_per_node));
  const std::vector<double> all = over_ranks(grid, backend, mine);

  Measured m;
  double flops = 0, seconds = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const GemmShape& s = shapes[i];
    const double shape_flops = linear_flops(s);
    m.gemm.push_back({dtype, s.m, s.k, s.n, shape_flops / all[i] * share / 1e12});
    flops += shape_flops, seconds += all[i];
  }
  if (seconds > 0) m.gemm_tflops = flops / seconds * share / 1e12;
  m.typical_gemm = typical_gemm_shape(shapes);
  m.overlap_sizes = overlap_probe_sizes(job, topo.world);
  // Attention's FLOPs over its time, all shapes together, as gemm_tflops.
  size_t at = shapes.size();
  double attention_flop_sum = 0, attention_seconds = 0;
  for (const AttentionShape& a : attention) attention_flop_sum += attention_flops(a), attention_seconds += all[at++];
  if (attention_seconds > 0) m.attention_tflops = attention_flop_sum / attention_seconds * share / 1e12;
  m.elementwise_GBps = probe.bytes / all[at] * share / 1e9;
  m.memory_gib = all[at + 1] / (1024.0 * 1024.0 * 1024.0);
  // A job's own shapes are what the model looks up; a square sweep only says what a GEMM
  // reaches, which gemm_tflops holds.
  if (!in.job) m.gemm.clear();
  return m;
}

// A compute of GEMMs that lasts about twice an all-reduce of `bytes` on `group`
// (overlap_gemm_count), from the medians over ranks of both timed alone, 5 times each (20
// unless quick): the overlap and time-sharing probes' compute.
struct ProbeCompute {
  int gemms = 1;
  std::function<void()> run;
};
ProbeCompute probe_compute(Communicator& group, CommGrid& grid, Backend& backend, bool quick,
                           CollectiveBuffers& buffers, ForwardGemm& gemm, double bytes) {
  const int rounds = quick ? 5 : 20;
  grid.world().barrier();
  const double gemm_s = over_ranks(grid, backend, {mean_seconds([&] { gemm.run(); }, rounds)}).front();
  buffers.reserve(bytes);
  const size_t count = static_cast<size_t>(bytes / sizeof(float));
  grid.world().barrier();
  const double all_reduce_s = over_ranks(grid, backend,
                                         {mean_seconds(
                                             [&] {
                                               group.all_reduce(buffers.in(), count, ElementType::float32);
                                               group.synchronize();
                                             },
                                             rounds)})
                                  .front();
  const int gemms = overlap_gemm_count(gemm_s, all_reduce_s);
  return {gemms, [&gemm, gemms] {
            for (int i = 0; i < gemms; ++i) gemm.run();
          }};
}

// "4 GEMM(s) 812 us, all_reduce of 256 KiB 410 us, <both> 950 us (means)": a probe's times.
std::string probe_times_text(const ProbeCompute& compute, const OverlapTimes& t, double bytes, const char* both) {
  return std::to_string(compute.gemms) + " GEMM(s) " + format_number("%.3g", t.compute_s * 1e6) +
         " us, all_reduce of " + bytes_text(bytes) + " " + format_number("%.3g", t.collective_s * 1e6) + " us, " +
         both + " " + format_number("%.3g", t.both_s * 1e6) + " us (means)";
}

// The median over ranks of each of `mine`'s times, so every rank gets the same fraction.
OverlapTimes times_over_ranks(CommGrid& grid, Backend& backend, const OverlapTimes& mine) {
  const std::vector<double> t =
      over_ranks(grid, backend, {mine.compute_s, mine.collective_s, mine.both_s, mine.hidden});
  return {t[0], t[1], t[2], t[3]};
}

// The overlap probe on one tier's groups (time_overlap) at each of `sizes`: all-reduces of that
// size beside a compute of GEMMs sized to it (probe_compute) and after it, in 3 rounds (10
// unless quick), each of kOverlapCalls calls a loop; the fraction hidden at each size.
OverlapCurve measure_overlap(Communicator& group, CommGrid& grid, Backend& backend, bool quick,
                             CollectiveBuffers& buffers, ForwardGemm& gemm, const std::vector<double>& sizes,
                             bool lead) {
  const int rounds = quick ? 3 : 10;
  OverlapCurve curve;
  for (const double bytes : sizes) {
    const ProbeCompute compute = probe_compute(group, grid, backend, quick, buffers, gemm, bytes);
    grid.world().barrier();
    const OverlapTimes t = times_over_ranks(grid, backend, time_overlap(group, bytes, rounds, buffers, compute.run));
    const std::string verdict = t.hidden >= 0 ? format_number("%.0f%%", 100 * t.hidden) + " of the all-reduce hidden"
                                              : "started beside the GEMMs the all-reduce cost " +
                                                    format_number("%.0f%%", -100 * t.hidden) +
                                                    " of its time more than waited for after them";
    say(lead, "  overlap, " + std::to_string(kOverlapCalls) +
                  " of each in a row, per call: " + probe_times_text(compute, t, bytes, "started, GEMMs, finished") +
                  ": " + verdict + " (median of the rounds)");
    curve.points.push_back({bytes, t.hidden});
  }
  if (curve.costs_somewhere())
    say(lead,
        "  overlap costs at some sizes on this tier: training.overlap_comm = \"auto\" overlaps a layout only "
        "where its overlapped collectives hide more than they cost, each at the fraction for its size");
  return curve;
}

// The time-sharing probe on one axis's groups (time_sharing), for where this host's ranks
// outnumber its cores: the overlap probe's compute and largest size, in 3 rounds (10 unless quick).
double measure_sharing(Communicator& group, CommGrid& grid, Backend& backend, bool quick, CollectiveBuffers& buffers,
                       const ProbeCompute& compute, double bytes, bool lead) {
  const int rounds = quick ? 3 : 10;
  const OverlapTimes t = times_over_ranks(
      grid, backend, time_sharing(group, bytes, rounds, buffers, compute.run, [&] { grid.world().barrier(); }));
  say(lead, "  time-sharing, " + std::to_string(kSharingCalls) +
                " of each in a row: " + probe_times_text(compute, t, bytes, "GEMMs each followed by the all_reduce") +
                ": " + format_number("%.0f%%", 100 * t.hidden) +
                " of the all-reduces filled by other ranks' compute (median of the rounds)");
  return t.hidden;
}

// A tier's (or group size's) kinds as measure_kinds fitted them, and the fraction of the
// host's cores their calls kept busy (cores_busy_fraction; 0 where ranks do not share cores).
struct KindsMeasured {
  CollectiveFits fits;
  double cores_busy = 0;
};

// Every calibrated kind swept and fitted on `group` (the `size`-rank groups of one axis of
// `grid`, all at once over `tier`), each call after one `compute`. `ranks_per_core`: this
// host's ranks per core, above 1 where they share cores (then each size's CPU time is said and
// cores_busy measured).
KindsMeasured measure_kinds(Communicator& group, CommGrid& grid, Backend& backend, const CalibrateInputs& in,
                            LinkTier tier, int size, CollectiveBuffers& buffers, ForwardGemm& compute,
                            double ranks_per_core, bool lead) {
  const bool shared_cores = ranks_per_core > 1;
  KindsMeasured measured;
  CollectiveFits& fits = measured.fits;
  std::vector<CollectiveSweep> sweeps;
  for (const CollectiveKind kind : kCalibratedKinds) {
    say(lead, std::string(link_tier_name(tier)) + " " + collective_name(kind) + ", groups of " + std::to_string(size));
    grid.world().barrier();
    const CollectiveSweep sweep = sweep_collective(
        group, kind, in.quick, buffers, [&] { compute.run(); },
        [&](const std::vector<double>& mine) { return over_ranks(grid, backend, mine); });
    std::vector<CollectiveSample> samples;
    std::string times;
    for (size_t i = 0; i < sweep.bytes.size(); ++i) {
      samples.push_back({sweep.bytes[i], sweep.seconds[i]});
      times += (i ? ", " : "") + bytes_text(sweep.bytes[i]) + " " + format_number("%.3g", sweep.seconds[i] * 1e6) +
               " us" + (shared_cores ? " (" + format_number("%.3g", sweep.cpu_seconds[i] * 1e6) + " on a core)" : "");
    }
    sweeps.push_back(sweep);
    say(lead, "  times (median of the passes' means): " + times);
    // The same samples on every rank: every rank fits, and fails, alike.
    const auto small_max = static_cast<double>(group.small_path_bytes(kind));
    const PiecewiseFit fit = fit_piecewise(kind, tier, size, samples, small_max, in.max_residual);
    CollectiveFit& site_fit = fits[static_cast<size_t>(kind)].emplace();
    site_fit.latency_us = fit.fit.latency_s * 1e6;
    site_fit.bandwidth_GBps = fit.fit.bandwidth_bytes_per_s / 1e9;
    site_fit.residual = fit.residual;
    // The times themselves price the calls of this group size within the swept sizes: a step
    // in the cost between two sizes (Gloo's all-reduce going from one exchange to a ring of
    // pieces) is what the lines, fitted over every size, miss (layout/measured_sweep.hpp).
    MeasuredSweep& swept = site_fit.measured.emplace();
    swept.ranks = size;
    for (const CollectiveSample& sample : samples) swept.points.push_back({sample.bytes, sample.seconds});
    std::string said = "  alpha " + format_number("%.3g", site_fit.latency_us) + " us, beta " +
                       format_number("%.3g", site_fit.bandwidth_GBps) + " GB/s";
    if (fit.small) {
      site_fit.small_max_bytes = static_cast<int64_t>(fit.small_max_bytes);
      site_fit.small_latency_us = fit.small->latency_s * 1e6;
      site_fit.small_bandwidth_GBps = fit.small->bandwidth_bytes_per_s / 1e9;
      said += " above " + bytes_text(fit.small_max_bytes) + " (the communicator's other path up to there: alpha " +
              format_number("%.3g", site_fit.small_latency_us) + " us, beta " +
              format_number("%.3g", site_fit.small_bandwidth_GBps) + " GB/s)";
    }
    say(lead, said + ", residual " + format_number("%.3f", fit.residual));
  }
  if (shared_cores) {
    measured.cores_busy = cores_busy_fraction(sweeps, ranks_per_core);
    say(lead, "  cores busy: with " + format_number("%.3g", ranks_per_core) + " ranks per core, the calls kept " +
                  format_number("%.0f%%", 100 * measured.cores_busy) +
                  " of the cores busy themselves (median over the sizes of the CPU time on a core per second of "
                  "a call, times the ranks per core)");
  }
  return measured;
}

// The plan's tiers on the calibration grid (kinds, overlap and time-sharing), then each other
// group size on a grid of its own, the same three, connected and torn down in turn (every rank
// builds the same ones). `ranks_per_core`: this host's ranks per core, above 1 where they share cores.
void measure_links(PmixClient& client, CommGrid& grid, Backend& backend, const CalibrateInputs& in,
                   const LinkPlan& plan, const GridOptions& options, ElementType dtype, double ranks_per_core,
                   bool lead, Measured& m) {
  const bool shared_cores = ranks_per_core > 1;
  CollectiveBuffers buffers(backend);
  ForwardGemm compute(backend, dtype, m.typical_gemm);
  say(lead, "each timed collective follows one forward GEMM m=" + std::to_string(m.typical_gemm.m) +
                " k=" + std::to_string(m.typical_gemm.k) + " n=" + std::to_string(m.typical_gemm.n) +
                " on every rank, as in training");
  for (const TierProbe& probe : plan.probes) {
    const KindsMeasured kinds = measure_kinds(grid.axis(probe.axis), grid, backend, in, probe.tier, probe.group_size,
                                              buffers, compute, ranks_per_core, lead);
    Communicator& group = grid.axis(probe.axis);
    const OverlapCurve overlap =
        measure_overlap(group, grid, backend, in.quick, buffers, compute, m.overlap_sizes, lead);
    double filled = 0;
    if (shared_cores) {
      const double bytes = m.overlap_sizes.back();
      const ProbeCompute gemms = probe_compute(group, grid, backend, in.quick, buffers, compute, bytes);
      filled = measure_sharing(group, grid, backend, in.quick, buffers, gemms, bytes, lead);
    }
    m.links.push_back({probe, kinds.fits, overlap, {filled, kinds.cores_busy}});
  }
  for (const GroupProbe& probe : plan.groups) {
    say(lead, std::string(link_tier_name(probe.tier)) + " on groups of " + std::to_string(probe.group_size) +
                  ": grid " + format_layout(probe.layout));
    CommGrid group_grid(client, probe.layout, options.timeout, options.single_host, options.collectives,
                        "calibrate-" + format_layout(probe.layout));
    group_grid.order_with_compute(train_compute_stream(backend));
    GroupFits fits;
    fits.ranks = probe.group_size;
    Communicator& group = group_grid.axis(probe.axis);
    const KindsMeasured kinds = measure_kinds(group, group_grid, backend, in, probe.tier, probe.group_size, buffers,
                                              compute, ranks_per_core, lead);
    fits.fits = kinds.fits;
    fits.cores_busy = kinds.cores_busy;
    // Its own overlap: where ranks share cores what a started call costs depends on how many
    // wait for each other in it (layout_inputs.hpp, MeasuredGroup::overlap).
    fits.overlap = measure_overlap(group, group_grid, backend, in.quick, buffers, compute, m.overlap_sizes, lead);
    if (shared_cores) {
      const double bytes = m.overlap_sizes.back();
      const ProbeCompute gemms = probe_compute(group, group_grid, backend, in.quick, buffers, compute, bytes);
      fits.filled_by_others = measure_sharing(group, group_grid, backend, in.quick, buffers, gemms, bytes, lead);
    }
    m.groups.push_back({probe.tier, fits});
  }
}

// The base site with the measured keys replaced; the rest, and the tiers not measured, kept.
SiteConfig calibrated_site(const SiteConfig& base, const Measured& m, ElementType dtype, const Topology& topo,
                           const std::string& device) {
  SiteConfig s = base;
  if (m.memory_gib > 0) s.memory_gib = m.memory_gib;  // 0: /proc/meminfo had no MemTotal
  (dtype == ElementType::float32 ? s.gemm_tflops_float32 : s.gemm_tflops_bfloat16) = m.gemm_tflops;
  (dtype == ElementType::float32 ? s.attention_tflops_float32 : s.attention_tflops_bfloat16) = m.attention_tflops;
  std::erase_if(s.gemm, [&](const SiteGemm& g) { return g.dtype == dtype; });
  s.gemm.insert(s.gemm.end(), m.gemm.begin(), m.gemm.end());
  s.elementwise_GBps = m.elementwise_GBps;
  for (const auto& [probe, fits, overlap, sharing] : m.links) {
    for (const SiteTier& tier : kSiteTiers) {
      if (tier.tier != probe.tier) continue;
      s.*tier.fits = fits;
      (s.*tier.groups).clear();  // the base site's were measured with its fits
      s.*tier.overlap = overlap;
      s.*tier.filled_by_others = sharing.filled_by_others;
      s.*tier.cores_busy = sharing.cores_busy;
      // The tier's own figures, which tools reading one figure per tier show, take the
      // all-reduce fit; the model prices every fitted kind by its own.
      const CollectiveFit& all_reduce = *fits[static_cast<size_t>(CollectiveKind::all_reduce)];
      s.*tier.latency_us = all_reduce.latency_us;
      s.*tier.bandwidth_GBps = all_reduce.bandwidth_GBps;
    }
  }
  for (const auto& [tier_measured, fits] : m.groups)
    for (const SiteTier& tier : kSiteTiers)
      if (tier.tier == tier_measured) (s.*tier.groups).push_back(fits);
  SiteCalibration& c = s.calibration;
  c.date = utc_now_text("%Y-%m-%dT%H:%M:%SZ");
  c.hosts = topo.hostnames;
  c.slurm_job_id = environment("SLURM_JOB_ID").value_or("");
  c.axonn_version = kAxonnVersion;
  c.ranks = topo.world;
  c.ranks_per_node = topo.uniform_tasks_per_node();
  c.device = device;
  return s;
}

// Writes `text` to a temporary file beside `path` and renames it over `path`: a reader never
// sees half a site config.
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw CalibrationError("cannot write " + tmp + " (disk full?); the measured site is not saved");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw CalibrationError("cannot rename " + tmp + " to " + path + ": " + ec.message());
}

}  // namespace

int command_calibrate(const CommandArgs& argv) {
  const std::optional<Args> parsed =
      parse_or_usage(argv, calibrate_option_specs(),
                     "axonn calibrate --output SITE.toml [options]   (under axonn run or srun --mpi=pmix)");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  const CalibrateInputs in = load_calibrate_inputs(args);  // before PMIx: a bad input is exit 2 anywhere

  PmixClient client;
  const Topology topo = topology_from_pmix(client);
  const bool lead = topo.rank == 0;
  const LinkPlan plan = plan_links(topo, in.site.config, in.tiers);
  const TrainDevice device = choose_train_device(in.device_job, topo);
  auto backend = make_train_backend(device, in.device_job, topo);
  const ElementType dtype = in.device_job.training.dtype;
  const std::string device_text = describe_train_device(device, in.device_job);
  say(lead, in.site.chosen_by);
  say(lead, std::to_string(topo.world) + " rank(s) on " + std::to_string(topo.nodes) + " node(s), " + device_text +
                "; measuring grid " + format_layout(plan.layout) + " (data x X x Y x Z)");
  // A CPU site's per-"GPU" figures describe one of gpus_per_node shares of a node
  // (train_command.cpp scales them to the ranks a run puts there): rates measured with
  // local_size ranks sharing the node are converted to that share.
  const double share =
      backend->device_is_host() ? static_cast<double>(topo.local_size) / in.site.config.gpus_per_node : 1.0;
  if (share != 1.0)
    say(lead,
        "note: " + std::to_string(topo.local_size) +
            " ranks per node but the site has gpus_per_node = " + std::to_string(in.site.config.gpus_per_node) +
            ": per-rank rates are scaled by " + format_number("%.3g", share) +
            " to one of its shares; calibrate with as many ranks per node as the site has GPUs for measured figures");

  const auto timeout =
      std::chrono::milliseconds(args.integer("timeout-ms", kTimeoutMsMin, kTimeoutMsMax).value_or(300'000));
  const GridOptions options{timeout, topo.nodes == 1 || std::getenv("AXONN_LAUNCHER") != nullptr, device.collectives};
  CommGrid grid(client, plan.layout, options.timeout, options.single_host, options.collectives);
  grid.order_with_compute(train_compute_stream(*backend));

  // Ranks that take turns on this host's cores (the CPU backend gives each rank cores / ranks
  // per node threads, at least one): their blocking collectives' time is partly others'
  // compute, which the time-sharing probe measures.
  const int host_ranks = options.single_host ? topo.world : topo.local_size;
  const bool shared_cores = backend->device_is_host() && host_ranks > host_cores();
  const double ranks_per_core = shared_cores ? static_cast<double>(host_ranks) / host_cores() : 1;
  if (shared_cores)
    say(lead, std::to_string(host_ranks) + " ranks share this host's " + std::to_string(host_cores()) +
                  " cores: each tier's collectives are also timed for the time other ranks compute through and "
                  "for the cores they keep busy themselves");

  const auto start = std::chrono::steady_clock::now();
  Measured measured = measure_compute(grid, *backend, in, topo, device, dtype, share, lead);
  try {
    measure_links(client, grid, *backend, in, plan, options, dtype, ranks_per_core, lead, measured);
  } catch (const CalibrationError& e) {
    // Every rank fitted the same samples and failed alike: rank 0 says why, then all stop
    // together (a rank that left first would make the launcher stop rank 0 before it spoke).
    const int code = lead ? report_error("calibrate", e) : e.exit_code();
    grid.world().barrier();
    return code;
  }
  if (!lead) return exit_code::ok;

  const SiteConfig& base = in.site.config;
  const SiteConfig out = calibrated_site(base, measured, dtype, topo, device_text);
  write_file(in.output, format_site_toml(out, "Written by axonn calibrate from " + base.source + " (site " + base.name +
                                                  ") on " + out.calibration.date + ": the keys it measured are " +
                                                  "replaced, every other key is the base site's.\n"
                                                  "docs/site-admin.md, \"Calibrating a site\", says what each means."));
  say(lead, "measured in " +
                format_number("%.1f", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) +
                " s");
  std::printf("calibrate: wrote %s; changes against %s (site %s):\n", in.output.c_str(), base.source.c_str(),
              base.name.c_str());
  for (const std::string& line : site_differences(base, out)) std::printf("  %s\n", line.c_str());
  for (const std::string& missing : plan.missing)
    std::printf("calibrate: not measured, keys kept from the base site: %s\n", missing.c_str());
  std::fflush(stdout);
  return exit_code::ok;
}

}  // namespace axonn
