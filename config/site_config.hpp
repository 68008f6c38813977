#pragma once
// A site's hardware and policy (site_configs/<site>.toml; every key documented in
// site_configs/example.toml). Plain struct with explicit defaults; units in the names.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layout/layout_cost.hpp"
#include "layout/layout_inputs.hpp"

namespace axonn {

// One collective kind on one link tier as `axonn calibrate` fitted it: the site's
// [network.<tier>] <kind> = { latency_us, bandwidth_GBps } (alpha and beta of collective.hpp's
// formulas), and the fit's residual from [calibration.residual] when the file has one.
// With `small_max_bytes` > 0 a second line prices the kind's messages of up to that many
// bytes (nccl-tests size), where the implementation takes another path for them
// (layout_inputs.hpp, SmallMessageLink): { small_max_bytes, small_latency_us,
// small_bandwidth_GBps } in the same inline table.
struct CollectiveFit {
  double latency_us = 0;
  double bandwidth_GBps = 0;
  std::optional<double> residual;  // RMS of (measured - fit) / measured over the sizes, both lines together
  int64_t small_max_bytes = 0;     // 0: one line for every size
  double small_latency_us = 0;
  double small_bandwidth_GBps = 0;
  // The times the lines were fitted to, { measured_ranks = 4, measured = [{ bytes = 4096,
  // us = 43.6 }, ...] } in the same inline table (sizes ascending), which price a call on
  // groups of measured_ranks within those sizes (layout/measured_sweep.hpp); absent: the
  // lines price every call.
  std::optional<MeasuredSweep> measured;
};
// Per CollectiveKind (as index); calibrate fits the kinds the trainer uses, kCalibratedKinds
// (all_to_all: the token exchange of expert parallelism), and [network.<tier>] accepts them.
using CollectiveFits = std::array<std::optional<CollectiveFit>, kCollectiveKindCount>;
inline constexpr std::array<CollectiveKind, 4> kCalibratedKinds = {
    CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_to_all};

// A tier's fits on groups of `ranks`, a size other than its main probe's: [network.<tier>]
// groups = [{ ranks = 2, all_reduce = { latency_us, bandwidth_GBps }, ... }, ...], each size
// at most once (layout_inputs.hpp, MeasuredGroup, says why the size matters).
struct GroupFits {
  int ranks = 0;
  CollectiveFits fits;
  double filled_by_others = 0;  // as the tier's (SiteConfig, [network.<tier>]), on groups of `ranks`
  double cores_busy = 0;        // as the tier's, on groups of `ranks`
  OverlapCurve overlap;         // as the tier's, on groups of `ranks`; empty: the tier's
};

// One GEMM shape's measured rate, [compute] gemm = [{ dtype, m, k, n, tflops }, ...]: the
// forward and both backward GEMMs of a linear layer's shard (layout_inputs.hpp, GemmShape).
struct SiteGemm {
  ElementType dtype = ElementType::float32;
  int64_t m = 0, k = 0, n = 0;
  double tflops = 0;
};

// Where and how the measured keys were measured ([calibration]); written by `axonn
// calibrate`, read back so that a calibrated file loads and can be calibrated again.
struct SiteCalibration {
  std::string date;                // UTC, "2026-11-27T10:31:02Z"; empty: never calibrated
  std::vector<std::string> hosts;  // the allocation's nodes
  std::string slurm_job_id;        // empty outside Slurm
  std::string axonn_version;
  int ranks = 0;
  int ranks_per_node = 0;
  std::string device;  // "backend cpu (float32, 2 threads), collectives gloo"
  bool present() const { return !date.empty(); }
};

struct SiteConfig {
  std::string source;  // file it was loaded from
  std::string name = "unnamed";
  // [node]
  int gpus_per_node = 1;
  double memory_gib = 16;  // per GPU
  // [compute], per GPU
  double peak_tflops_float32 = 1;
  double peak_tflops_bfloat16 = 1;
  double efficiency = 0.5;  // achieved fraction of peak in the model's GEMMs
  // Measured by `axonn calibrate`, per GPU (per rank's share of a CPU node); 0 / empty: not
  // measured, and the model uses peak x efficiency.
  double gemm_tflops_float32 = 0;  // the measured GEMMs' FLOPs over their time
  double gemm_tflops_bfloat16 = 0;
  std::vector<SiteGemm> gemm;           // by shape
  double attention_tflops_float32 = 0;  // causal attention forward + backward, the model's FLOPs over their time
  double attention_tflops_bfloat16 = 0;
  double elementwise_GBps = 0;  // a large AXPY's bytes read and written per second
  // [network], bandwidth per GPU per direction
  double intra_node_bandwidth_GBps = 100;
  double intra_node_latency_us = 2;
  double inter_node_bandwidth_GBps = 25;
  double inter_node_latency_us = 5;
  double inter_switch_bandwidth_GBps = 12.5;
  double inter_switch_latency_us = 10;
  // [network.intra_node], [network.inter_node], [network.inter_switch]: measured per kind,
  // overlap = the fraction of a collective's time hidden when it runs beside compute (one
  // number for every size, or [{ bytes, fraction }, ...] measured at sizes ascending and
  // interpolated between them; layout/overlap_curve.hpp), and
  // filled_by_others = the fraction of a blocking collective's time in which the other ranks
  // that share this rank's cores compute instead, and cores_busy = the fraction of the node's
  // cores that a collective's ranks keep busy for its time, which no other rank computes
  // through (0: none, as without the keys; layout_inputs.hpp, MeasuredTier)
  CollectiveFits intra_node_fits, inter_node_fits, inter_switch_fits;
  std::vector<GroupFits> intra_node_groups, inter_node_groups, inter_switch_groups;
  OverlapCurve intra_node_overlap, inter_node_overlap, inter_switch_overlap;
  double intra_node_filled_by_others = 0, inter_node_filled_by_others = 0, inter_switch_filled_by_others = 0;
  double intra_node_cores_busy = 0, inter_node_cores_busy = 0, inter_switch_cores_busy = 0;
  int nodes_per_switch = 0;  // 0: one switch for all nodes
  // Or the hosts under each switch, host lists expanded ("nid[001-016]" -> 16 names);
  // empty: use nodes_per_switch. At most one of the two is set.
  std::vector<std::vector<std::string>> switches;
  // [policy]
  std::vector<int> allowed_axis_sizes;  // empty: any
  int max_tensor_parallel = 0;          // 0: no limit
  ElementType default_dtype = ElementType::float32;
  std::string checkpoint_dir = "checkpoints";  // relative: against the job's working directory
  int signal_lead_s = 120;
  std::string preempt_signal = "USR1";  // run.preempt_signal of jobs that do not set it
  double memory_headroom = 0.1;
  // [cost], per GPU; 0: not known, and `axonn layout --scan` leaves energy and cost out
  double gpu_power_watts = 0;  // power drawn while training (the TDP, or a measured figure)
  double gpu_hour_cost = 0;    // price of one GPU for one hour, in the site's currency
  SiteCalibration calibration;
};

// The three link tiers with their site keys, for code that treats them alike (the loader,
// the writer, calibrate): "intra_node" -> intra_node_bandwidth_GBps, intra_node_latency_us,
// [network.intra_node].
struct SiteTier {
  LinkTier tier;
  const char* key;  // "intra_node", "inter_node", "inter_switch"
  double SiteConfig::*bandwidth_GBps;
  double SiteConfig::*latency_us;
  CollectiveFits SiteConfig::*fits;
  std::vector<GroupFits> SiteConfig::*groups;
  OverlapCurve SiteConfig::*overlap;
  double SiteConfig::*filled_by_others;
  double SiteConfig::*cores_busy;
};
inline constexpr std::array<SiteTier, 3> kSiteTiers = {{
    {LinkTier::intra_node, "intra_node", &SiteConfig::intra_node_bandwidth_GBps, &SiteConfig::intra_node_latency_us,
     &SiteConfig::intra_node_fits, &SiteConfig::intra_node_groups, &SiteConfig::intra_node_overlap,
     &SiteConfig::intra_node_filled_by_others, &SiteConfig::intra_node_cores_busy},
    {LinkTier::inter_node, "inter_node", &SiteConfig::inter_node_bandwidth_GBps, &SiteConfig::inter_node_latency_us,
     &SiteConfig::inter_node_fits, &SiteConfig::inter_node_groups, &SiteConfig::inter_node_overlap,
     &SiteConfig::inter_node_filled_by_others, &SiteConfig::inter_node_cores_busy},
    {LinkTier::inter_switch, "inter_switch", &SiteConfig::inter_switch_bandwidth_GBps,
     &SiteConfig::inter_switch_latency_us, &SiteConfig::inter_switch_fits, &SiteConfig::inter_switch_groups,
     &SiteConfig::inter_switch_overlap, &SiteConfig::inter_switch_filled_by_others,
     &SiteConfig::inter_switch_cores_busy},
}};

// The measured GEMM rate of a dtype (gemm_tflops_float32 or _bfloat16), 0 when not measured.
double site_gemm_tflops(const SiteConfig& site, ElementType dtype);
// The measured attention rate of a dtype (attention_tflops_float32 or _bfloat16), 0 when not measured.
double site_attention_tflops(const SiteConfig& site, ElementType dtype);

// Throws ConfigError with file:line:column for unknown keys, wrong types, bad values.
SiteConfig load_site_config(const std::string& path);
SiteConfig load_site_config_string(const std::string& text, const std::string& name);

// The [policy] restrictions the chooser applies.
Policy site_policy(const SiteConfig& site);

// The values run.preempt_signal (job) and policy.preempt_signal (site) may take.
inline const std::vector<std::string> kPreemptSignals = {"USR1", "USR2", "HUP"};

// The element type a dtype key names: "float32" | "bfloat16".
ElementType parse_element_type(const std::string& name);

}  // namespace axonn
