#include "config/site_config.hpp"

#include <algorithm>
#include <iterator>
#include <map>

#include "config/config_error.hpp"
#include "config/hostlist.hpp"
#include "config/toml_reader.hpp"
#include "core/number_text.hpp"

namespace axonn {
namespace {

// network.switches: hosts per switch, host lists expanded; a host under two switches is an error.
std::vector<std::vector<std::string>> read_switches(TomlReader& t) {
  std::vector<std::vector<std::string>> switches;
  std::map<std::string, size_t> switch_of_host;
  for (const auto& list : t.string_lists("switches")) {
    auto& hosts = switches.emplace_back();
    for (const auto& item : list) {
      std::vector<std::string> names;
      try {
        names = expand_hostlist(item.value);
      } catch (const ConfigError& e) {
        throw ConfigError(item.where + "network.switches: " + e.what());
      }
      for (auto& name : names) {
        const auto [it, fresh] = switch_of_host.emplace(name, switches.size() - 1);
        if (!fresh)
          throw ConfigError(item.where + "network.switches: host '" + name + "' is listed under switch " +
                            std::to_string(it->second) + " and again under switch " +
                            std::to_string(switches.size() - 1) + " (counting from 0); list each host once");
        hosts.push_back(std::move(name));
      }
    }
    if (hosts.empty())
      t.fail("switches", "holds an empty list (switch " + std::to_string(switches.size() - 1) +
                             ", counting from 0); remove it or name its hosts");
  }
  return switches;
}

// The smallest measured rate a file may give (TFLOP/s, GB/s): a measured key is absent or
// positive; 0 is what "not measured" means in SiteConfig.
constexpr double kMeasuredMin = 1e-9;

// compute.gemm: measured rates by shape, at most one per (dtype, m, k, n).
std::vector<SiteGemm> read_gemm(TomlReader& t) {
  std::vector<SiteGemm> out;
  for (TomlReader& e : t.tables("gemm")) {
    for (const char* key : {"m", "k", "n", "tflops"})
      if (!e.has(key))
        e.fail(key, "is missing; every compute.gemm entry has m, k, n and tflops (and dtype, float32 unless given)");
    SiteGemm g;
    g.dtype = parse_element_type(e.string("dtype", "float32", {"float32", "bfloat16"}));
    g.m = e.integer("m", 0, 1, int64_t{1} << 40);
    g.k = e.integer("k", 0, 1, int64_t{1} << 40);
    g.n = e.integer("n", 0, 1, int64_t{1} << 40);
    g.tflops = e.number("tflops", 0, kMeasuredMin, 1e6);
    e.finish();
    for (const SiteGemm& before : out)
      if (before.dtype == g.dtype && before.m == g.m && before.k == g.k && before.n == g.n)
        e.fail("m", "= " + std::to_string(g.m) + ", k = " + std::to_string(g.k) + ", n = " + std::to_string(g.n) +
                        " (" + element_type_name(g.dtype) + ") is listed twice in compute.gemm; keep one");
    out.push_back(g);
  }
  return out;
}

// `t`'s `list` = [{ bytes = 4096, <value> = ... }, ...]: every entry with both, the sizes
// ascending, each value within [lo, hi]; `what` names an entry in the errors ("a measured
// overlap"), `owner` the list's ("an overlap's"). Pairs of (bytes, value).
std::vector<std::pair<double, double>> read_sized_list(TomlReader& t, const char* list, const char* value, double lo,
                                                       double hi, const std::string& what, const std::string& owner) {
  std::vector<std::pair<double, double>> points;
  for (TomlReader& p : t.tables(list)) {
    for (const char* key : {"bytes", value})
      if (!p.has(key)) p.fail(key, "is missing; " + what + " has bytes (nccl-tests size) and " + value);
    const double bytes = p.number("bytes", 0, 1, 1e15);
    if (!points.empty() && !(bytes > points.back().first))
      p.fail("bytes", "= " + format_number("%g", bytes) + " is not above the size before it; list " + owner +
                          " sizes ascending, each once");
    points.emplace_back(bytes, p.number(value, 0, lo, hi));
    p.finish();
  }
  return points;
}

// A fitted kind's measured_ranks and measured = [{ bytes, us }, ...]: both or neither, the
// sizes ascending, each time above 0.
std::optional<MeasuredSweep> read_sweep(TomlReader& k) {
  if (k.has("measured") != k.has("measured_ranks"))
    k.fail(k.has("measured") ? "measured_ranks" : "measured",
           "is missing; a measured sweep has measured_ranks (its group size) and measured (its times), or neither");
  if (!k.has("measured")) return std::nullopt;
  MeasuredSweep sweep;
  sweep.ranks = static_cast<int>(k.integer("measured_ranks", 0, 2, 1 << 24));
  for (const auto& [bytes, us] : read_sized_list(k, "measured", "us", 1e-3, 1e9, "a measured size", "a sweep's"))
    sweep.points.push_back({bytes, us * 1e-6});
  if (sweep.points.empty()) k.fail("measured", "is an empty list; give the sizes calibrate measured or remove it");
  return sweep;
}

// Per collective kind { latency_us, bandwidth_GBps }, both required, and the small-message
// line's three keys all or none: the kinds of [network.<tier>] or of one of its groups.
CollectiveFits read_kind_fits(TomlReader& t) {
  CollectiveFits fits;
  for (const CollectiveKind kind : kCalibratedKinds) {
    const char* name = collective_name(kind);
    auto k = t.table(name);
    if (!t.has(name)) continue;
    for (const char* key : {"latency_us", "bandwidth_GBps"})
      if (!k.has(key)) k.fail(key, "is missing; a fitted collective has both latency_us and bandwidth_GBps");
    CollectiveFit fit;
    fit.latency_us = k.number("latency_us", 0, 0, 1e6);
    fit.bandwidth_GBps = k.number("bandwidth_GBps", 0, kMeasuredMin, 1e6);
    const char* small_keys[] = {"small_max_bytes", "small_latency_us", "small_bandwidth_GBps"};
    const int small_given = static_cast<int>(
        std::count_if(std::begin(small_keys), std::end(small_keys), [&](const char* key) { return k.has(key); }));
    if (small_given != 0 && small_given != 3)
      for (const char* key : small_keys)
        if (!k.has(key))
          k.fail(key,
                 "is missing; a small-message line has small_max_bytes, small_latency_us and "
                 "small_bandwidth_GBps, or none of them");
    fit.small_max_bytes = k.integer("small_max_bytes", 0, 1, int64_t{1} << 40);
    fit.small_latency_us = k.number("small_latency_us", 0, 0, 1e6);
    fit.small_bandwidth_GBps = k.number("small_bandwidth_GBps", 0, kMeasuredMin, 1e6);
    fit.measured = read_sweep(k);
    k.finish();
    fits[static_cast<size_t>(kind)] = fit;
  }
  return fits;
}

// A `groups` entry's ranks: required, >= 2, not listed before in `groups`.
int read_group_ranks(TomlReader& e, const std::vector<GroupFits>& before, const std::string& what) {
  if (!e.has("ranks")) e.fail("ranks", "is missing; every " + what + " entry names its group size, ranks = 2");
  const int ranks = static_cast<int>(e.integer("ranks", 0, 2, 1 << 24));
  for (const GroupFits& g : before)
    if (g.ranks == ranks) e.fail("ranks", "= " + std::to_string(ranks) + " is listed twice in " + what + "; keep one");
  return ranks;
}

// A tier's `overlap`: one fraction for every size (overlap = 0.8), or the fractions measured
// at sizes, ascending (overlap = [{ bytes = 16384, fraction = -0.2 }, { bytes = 196608,
// fraction = 0.3 }]).
OverlapCurve read_overlap(TomlReader& t) {
  if (!t.is_array("overlap")) return OverlapCurve::flat(t.number("overlap", 0, -1, 1));
  OverlapCurve curve;
  for (const auto& [bytes, fraction] :
       read_sized_list(t, "overlap", "fraction", -1, 1, "a measured overlap", "an overlap's"))
    curve.points.push_back({bytes, fraction});
  if (curve.points.empty())
    t.fail("overlap", "is an empty list; give a fraction (overlap = 0.8) or the sizes calibrate measured");
  return curve;
}

// [network.<tier>] into `s`: the kinds (read_kind_fits), overlap (read_overlap),
// filled_by_others and cores_busy (fractions), and groups, each entry a size, its kinds, its
// filled_by_others, its cores_busy and its overlap.
void read_tier(TomlReader& network, const SiteTier& tier, SiteConfig& s) {
  auto t = network.table(tier.key);
  s.*tier.overlap = read_overlap(t);
  s.*tier.filled_by_others = t.number("filled_by_others", 0, 0, 1);
  s.*tier.cores_busy = t.number("cores_busy", 0, 0, 1);
  s.*tier.fits = read_kind_fits(t);
  std::vector<GroupFits>& groups = s.*tier.groups;
  const std::string what = std::string("network.") + tier.key + ".groups";
  for (TomlReader& e : t.tables("groups")) {
    GroupFits g;
    g.ranks = read_group_ranks(e, groups, what);
    g.fits = read_kind_fits(e);
    g.filled_by_others = e.number("filled_by_others", 0, 0, 1);
    g.cores_busy = e.number("cores_busy", 0, 0, 1);
    g.overlap = read_overlap(e);
    e.finish();
    groups.push_back(g);
  }
  t.finish();
}

// "2026-11-27T10:31:02Z", as calibrate writes [calibration] date.
bool is_utc_timestamp(const std::string& s) {
  static const std::string form = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != form.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (form[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != form[i]) return false;
  return true;
}

// Each kind's residual in `r` onto its fit in `fits`, which `where` ("[network.intra_node]")
// must have.
void read_residuals(TomlReader& r, CollectiveFits& fits, const std::string& where) {
  for (const CollectiveKind kind : kCalibratedKinds) {
    const char* name = collective_name(kind);
    const double value = r.number(name, 0, 0, 1e3);
    if (!r.has(name)) continue;
    auto& fit = fits[static_cast<size_t>(kind)];
    if (!fit)
      r.fail(name, "is the residual of a fit that " + where + " does not have; add " + name +
                       " = { latency_us = ..., bandwidth_GBps = ... } there or remove this line");
    fit->residual = value;
  }
}

// [calibration], and its residual table onto the fits read from [network.<tier>].
void read_calibration(TomlReader& root, SiteConfig& s) {
  auto t = root.table("calibration");
  if (!root.has("calibration")) return;
  SiteCalibration& c = s.calibration;
  if (!t.has("date")) t.fail("date", "is missing; [calibration] records when the site was measured");
  c.date = t.string("date", "");
  if (!is_utc_timestamp(c.date))
    t.fail("date", "= \"" + c.date + "\" is not a UTC time as calibrate writes it, e.g. \"2026-11-27T10:31:02Z\"");
  c.hosts = t.strings("hosts");
  c.slurm_job_id = t.string("slurm_job_id", "");
  c.axonn_version = t.string("axonn_version", "");
  c.ranks = static_cast<int>(t.integer("ranks", 0, 1, 1 << 24));
  c.ranks_per_node = static_cast<int>(t.integer("ranks_per_node", 0, 1, 1 << 24));
  c.device = t.string("device", "");
  auto residual = t.table("residual");
  for (const SiteTier& tier : kSiteTiers) {
    auto r = residual.table(tier.key);
    read_residuals(r, s.*tier.fits, std::string("[network.") + tier.key + "]");
    std::vector<GroupFits> listed;  // the residual entries' sizes, for read_group_ranks
    const std::string what = std::string("calibration.residual.") + tier.key + ".groups";
    for (TomlReader& e : r.tables("groups")) {
      const int ranks = read_group_ranks(e, listed, what);
      listed.emplace_back().ranks = ranks;
      auto& groups = s.*tier.groups;
      const auto group =
          std::find_if(groups.begin(), groups.end(), [&](const GroupFits& g) { return g.ranks == ranks; });
      if (group == groups.end())
        e.fail("ranks", "= " + std::to_string(ranks) + " has residuals but [network." + tier.key +
                            "] groups has no entry of that size; add it there or remove this one");
      read_residuals(e, group->fits,
                     std::string("the [network.") + tier.key + "] groups entry of ranks = " + std::to_string(ranks));
      e.finish();
    }
    r.finish();
  }
  residual.finish();
  t.finish();
}

SiteConfig read_site(const toml::table& root, const std::string& file) {
  SiteConfig s;
  s.source = file;
  TomlReader r(root, file, "");
  {
    auto t = r.table("site");
    s.name = t.string("name", s.name);
    t.finish();
  }
  {
    auto t = r.table("node");
    s.gpus_per_node = static_cast<int>(t.integer("gpus_per_node", s.gpus_per_node, 1, 1024));
    s.memory_gib = t.number("memory_gib", s.memory_gib, 0.001, 1e6);
    t.finish();
  }
  {
    auto t = r.table("compute");
    s.peak_tflops_float32 = t.number("peak_tflops_float32", s.peak_tflops_float32, 1e-6, 1e6);
    s.peak_tflops_bfloat16 = t.number("peak_tflops_bfloat16", s.peak_tflops_bfloat16, 1e-6, 1e6);
    s.efficiency = t.number("efficiency", s.efficiency, 0.001, 1.0);
    s.gemm_tflops_float32 = t.number("gemm_tflops_float32", 0, kMeasuredMin, 1e6);
    s.gemm_tflops_bfloat16 = t.number("gemm_tflops_bfloat16", 0, kMeasuredMin, 1e6);
    s.gemm = read_gemm(t);
    s.attention_tflops_float32 = t.number("attention_tflops_float32", 0, kMeasuredMin, 1e6);
    s.attention_tflops_bfloat16 = t.number("attention_tflops_bfloat16", 0, kMeasuredMin, 1e6);
    s.elementwise_GBps = t.number("elementwise_GBps", 0, kMeasuredMin, 1e6);
    t.finish();
  }
  {
    auto t = r.table("network");
    s.intra_node_bandwidth_GBps = t.number("intra_node_bandwidth_GBps", s.intra_node_bandwidth_GBps, 1e-6, 1e6);
    s.intra_node_latency_us = t.number("intra_node_latency_us", s.intra_node_latency_us, 0, 1e6);
    s.inter_node_bandwidth_GBps = t.number("inter_node_bandwidth_GBps", s.inter_node_bandwidth_GBps, 1e-6, 1e6);
    s.inter_node_latency_us = t.number("inter_node_latency_us", s.inter_node_latency_us, 0, 1e6);
    s.inter_switch_bandwidth_GBps = t.number("inter_switch_bandwidth_GBps", s.inter_switch_bandwidth_GBps, 1e-6, 1e6);
    s.inter_switch_latency_us = t.number("inter_switch_latency_us", s.inter_switch_latency_us, 0, 1e6);
    s.nodes_per_switch = static_cast<int>(t.integer("nodes_per_switch", s.nodes_per_switch, 0, 1 << 20));
    s.switches = read_switches(t);
    if (!s.switches.empty() && s.nodes_per_switch > 0)
      t.fail("switches", "and network.nodes_per_switch = " + std::to_string(s.nodes_per_switch) +
                             " both describe the switches; keep one of them");
    for (const SiteTier& tier : kSiteTiers) read_tier(t, tier, s);
    t.finish();
  }
  {
    auto t = r.table("policy");
    for (int64_t v : t.integers("allowed_axis_sizes", 1, 1 << 20)) s.allowed_axis_sizes.push_back(static_cast<int>(v));
    s.max_tensor_parallel = static_cast<int>(t.integer("max_tensor_parallel", s.max_tensor_parallel, 0, 1 << 20));
    s.default_dtype =
        parse_element_type(t.string("default_dtype", element_type_name(s.default_dtype), {"float32", "bfloat16"}));
    s.checkpoint_dir = t.string("checkpoint_dir", s.checkpoint_dir);
    s.signal_lead_s = static_cast<int>(t.integer("signal_lead_s", s.signal_lead_s, 0, 86400));
    s.preempt_signal = t.string("preempt_signal", s.preempt_signal, kPreemptSignals);
    s.memory_headroom = t.number("memory_headroom", s.memory_headroom, 0.0, 0.9);
    t.finish();
  }
  {
    auto t = r.table("cost");
    s.gpu_power_watts = t.number("gpu_power_watts", s.gpu_power_watts, 0.0, 1e5);
    s.gpu_hour_cost = t.number("gpu_hour_cost", s.gpu_hour_cost, 0.0, 1e6);
    t.finish();
  }
  read_calibration(r, s);
  r.finish();
  return s;
}

}  // namespace

ElementType parse_element_type(const std::string& name) {
  if (name == "float32") return ElementType::float32;
  if (name == "bfloat16") return ElementType::bfloat16;
  throw ConfigError("dtype \"" + name + "\" is not known; use \"float32\" or \"bfloat16\"");
}

SiteConfig load_site_config(const std::string& path) {
  return read_site(parse_toml_file(path, "a site config TOML (site_configs/example.toml documents every key)"), path);
}

SiteConfig load_site_config_string(const std::string& text, const std::string& name) {
  return read_site(parse_toml_string(text, name), name);
}

double site_gemm_tflops(const SiteConfig& site, ElementType dtype) {
  return dtype == ElementType::float32 ? site.gemm_tflops_float32 : site.gemm_tflops_bfloat16;
}

double site_attention_tflops(const SiteConfig& site, ElementType dtype) {
  return dtype == ElementType::float32 ? site.attention_tflops_float32 : site.attention_tflops_bfloat16;
}

Policy site_policy(const SiteConfig& site) {
  Policy p;
  p.allowed_axis_sizes = site.allowed_axis_sizes;
  p.max_tensor_parallel = site.max_tensor_parallel;
  return p;
}

}  // namespace axonn
