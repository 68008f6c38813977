#include "config/site_writer.hpp"

#include <charconv>
#include <cstdio>
#include <map>

namespace axonn {
namespace {

// The shortest text that reads back to `v` (std::to_chars' guarantee): 0.04, 100, 1e-09, all
// valid TOML numbers.
std::string number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "nan";
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string string_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
  return out + "]";
}

std::string integer_list(const std::vector<int>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + std::to_string(items[i]);
  return out + "]";
}

std::string switches_value(const std::vector<std::vector<std::string>>& switches) {
  std::string out = "[";
  for (size_t i = 0; i < switches.size(); ++i) out += (i ? ", " : "") + string_list(switches[i]);
  return out + "]";
}

// [{ dtype = "float32", m = 512, k = 64, n = 192, tflops = 0.021 }, ...], one shape a line.
std::string gemm_value(const std::vector<SiteGemm>& gemm) {
  std::string out = "[\n";
  for (const SiteGemm& g : gemm)
    out += "  { dtype = " + quoted(element_type_name(g.dtype)) + ", m = " + std::to_string(g.m) +
           ", k = " + std::to_string(g.k) + ", n = " + std::to_string(g.n) + ", tflops = " + number(g.tflops) + " },\n";
  return out + "]";
}

// "latency_us = ..., bandwidth_GBps = ...[, small_max_bytes = ..., small_latency_us = ...,
// small_bandwidth_GBps = ...]": the fit's lines, entries of its inline table.
std::string line_entries(const CollectiveFit& fit) {
  std::string out = "latency_us = ";
  out.append(number(fit.latency_us)).append(", bandwidth_GBps = ").append(number(fit.bandwidth_GBps));
  if (fit.small_max_bytes > 0)
    out.append(", small_max_bytes = ")
        .append(std::to_string(fit.small_max_bytes))
        .append(", small_latency_us = ")
        .append(number(fit.small_latency_us))
        .append(", small_bandwidth_GBps = ")
        .append(number(fit.small_bandwidth_GBps));
  return out;
}

// The fit as the differences show it: its lines, and the sweep's sizes counted rather than listed.
std::string fit_lines(const CollectiveFit& fit) {
  std::string out = "{ " + line_entries(fit);
  if (fit.measured)
    out.append(", measured at ")
        .append(std::to_string(fit.measured->points.size()))
        .append(" sizes on groups of ")
        .append(std::to_string(fit.measured->ranks));
  return out + " }";
}

// The fit's inline table: its lines and, where calibrate swept it, measured_ranks and
// measured = [{ bytes = 4096, us = 43.6 }, ...].
std::string fit_value(const CollectiveFit& fit) {
  std::string out = "{ " + line_entries(fit);
  if (fit.measured) {
    out.append(", measured_ranks = ").append(std::to_string(fit.measured->ranks)).append(", measured = [");
    for (size_t i = 0; i < fit.measured->points.size(); ++i)
      out.append(i ? ", " : "")
          .append("{ bytes = ")
          .append(number(fit.measured->points[i].bytes))
          .append(", us = ")
          .append(number(fit.measured->points[i].seconds * 1e6))
          .append(" }");
    out.append("]");
  }
  return out + " }";
}

// The fitted kinds of `fits` as inline-table entries: "all_reduce = { ... }, all_gather = ...".
std::string kind_fits_entries(const CollectiveFits& fits) {
  std::string out;
  for (const CollectiveKind kind : kCalibratedKinds)
    if (const auto& fit = fits[static_cast<size_t>(kind)])
      out.append(", ").append(collective_name(kind)).append(" = ").append(fit_value(*fit));
  return out;
}

// A tier's overlap: its one fraction where no size was measured, else [{ bytes = 16384,
// fraction = -0.2 }, ...], the sizes ascending.
std::string overlap_value(const OverlapCurve& curve) {
  if (curve.is_flat()) return number(curve.points[0].fraction);
  std::string out = "[";
  for (size_t i = 0; i < curve.points.size(); ++i)
    out.append(i ? ", " : "")
        .append("{ bytes = ")
        .append(number(curve.points[i].bytes))
        .append(", fraction = ")
        .append(number(curve.points[i].fraction))
        .append(" }");
  return out + "]";
}

// [{ ranks = 2, all_reduce = { latency_us = 30, bandwidth_GBps = 2 }, ... }, ...], a size a line.
std::string groups_value(const std::vector<GroupFits>& groups) {
  std::string out = "[\n";
  for (const GroupFits& g : groups) {
    out.append("  { ranks = ").append(std::to_string(g.ranks)).append(kind_fits_entries(g.fits));
    if (g.filled_by_others > 0) out.append(", filled_by_others = ").append(number(g.filled_by_others));
    if (g.cores_busy > 0) out.append(", cores_busy = ").append(number(g.cores_busy));
    if (!g.overlap.empty()) out.append(", overlap = ").append(overlap_value(g.overlap));
    out.append(" },\n");
  }
  return out + "]";
}

// The residuals of `fits` as inline-table entries: ", all_reduce = 0.1, ..."; empty without any.
std::string residual_entries(const CollectiveFits& fits) {
  std::string out;
  for (const CollectiveKind kind : kCalibratedKinds)
    if (const auto& fit = fits[static_cast<size_t>(kind)]; fit && fit->residual)
      out.append(", ").append(collective_name(kind)).append(" = ").append(number(*fit->residual));
  return out;
}

// [{ ranks = 2, all_reduce = 0.1, ... }, ...] for the groups with residuals; "" for none.
std::string group_residuals_value(const std::vector<GroupFits>& groups) {
  std::string out;
  for (const GroupFits& g : groups)
    if (const std::string entries = residual_entries(g.fits); !entries.empty())
      out.append("  { ranks = ").append(std::to_string(g.ranks)).append(entries).append(" },\n");
  return out.empty() ? out : "[\n" + out + "]";
}

}  // namespace

std::vector<SiteKey> site_keys(const SiteConfig& s) {
  std::vector<SiteKey> keys;
  auto add = [&](const std::string& table, const std::string& name, const std::string& value,
                 const std::string& comment = "") {
    keys.push_back({table, name, value, "", comment});
  };
  add("site", "name", quoted(s.name));
  add("node", "gpus_per_node", std::to_string(s.gpus_per_node), "GPUs (ranks) per node");
  add("node", "memory_gib", number(s.memory_gib), "GiB per GPU");
  add("compute", "peak_tflops_float32", number(s.peak_tflops_float32), "TFLOP/s per GPU");
  add("compute", "peak_tflops_bfloat16", number(s.peak_tflops_bfloat16), "TFLOP/s per GPU");
  add("compute", "efficiency", number(s.efficiency), "achieved fraction of peak in GEMMs");
  if (s.gemm_tflops_float32 > 0)
    add("compute", "gemm_tflops_float32", number(s.gemm_tflops_float32), "measured, TFLOP/s per GPU");
  if (s.gemm_tflops_bfloat16 > 0)
    add("compute", "gemm_tflops_bfloat16", number(s.gemm_tflops_bfloat16), "measured, TFLOP/s per GPU");
  if (s.attention_tflops_float32 > 0)
    add("compute", "attention_tflops_float32", number(s.attention_tflops_float32), "measured, TFLOP/s per GPU");
  if (s.attention_tflops_bfloat16 > 0)
    add("compute", "attention_tflops_bfloat16", number(s.attention_tflops_bfloat16), "measured, TFLOP/s per GPU");
  if (s.elementwise_GBps > 0)
    add("compute", "elementwise_GBps", number(s.elementwise_GBps), "measured, GB/s read and written per GPU");
  if (!s.gemm.empty()) {
    add("compute", "gemm", gemm_value(s.gemm), "measured per shape: forward, dX and dW GEMMs of a linear shard");
    keys.back().summary = std::to_string(s.gemm.size()) + " shape" + (s.gemm.size() == 1 ? "" : "s");
  }
  for (const SiteTier& tier : kSiteTiers) {
    add("network", std::string(tier.key) + "_bandwidth_GBps", number(s.*tier.bandwidth_GBps), "GB/s per GPU");
    add("network", std::string(tier.key) + "_latency_us", number(s.*tier.latency_us), "microseconds");
  }
  add("network", "nodes_per_switch", std::to_string(s.nodes_per_switch), "0 = one switch for all");
  add("network", "switches", switches_value(s.switches));
  for (const SiteTier& tier : kSiteTiers) {
    if (!(s.*tier.overlap).empty())
      add(std::string("network.") + tier.key, "overlap", overlap_value(s.*tier.overlap),
          "measured: fraction of a collective hidden beside compute, by its size (below 0: the extra it costs)");
    if (s.*tier.filled_by_others > 0)
      add(std::string("network.") + tier.key, "filled_by_others", number(s.*tier.filled_by_others),
          "measured: fraction of a blocking collective other ranks on the same cores compute through");
    if (s.*tier.cores_busy > 0)
      add(std::string("network.") + tier.key, "cores_busy", number(s.*tier.cores_busy),
          "measured: fraction of the node's cores a collective's ranks keep busy for its time");
    for (const CollectiveKind kind : kCalibratedKinds)
      if (const auto& fit = (s.*tier.fits)[static_cast<size_t>(kind)]) {
        add(std::string("network.") + tier.key, collective_name(kind), fit_value(*fit), "measured");
        if (fit->measured) keys.back().summary = fit_lines(*fit);
      }
    if (const auto& groups = s.*tier.groups; !groups.empty()) {
      add(std::string("network.") + tier.key, "groups", groups_value(groups),
          "measured on groups of other sizes, every group of a size at once");
      keys.back().summary = std::to_string(groups.size()) + " group size" + (groups.size() == 1 ? "" : "s");
    }
  }
  add("policy", "allowed_axis_sizes", integer_list(s.allowed_axis_sizes));
  add("policy", "max_tensor_parallel", std::to_string(s.max_tensor_parallel));
  add("policy", "default_dtype", quoted(element_type_name(s.default_dtype)));
  add("policy", "checkpoint_dir", quoted(s.checkpoint_dir));
  add("policy", "signal_lead_s", std::to_string(s.signal_lead_s));
  add("policy", "preempt_signal", quoted(s.preempt_signal));
  add("policy", "memory_headroom", number(s.memory_headroom));
  add("cost", "gpu_power_watts", number(s.gpu_power_watts), "W per GPU while training; 0 = not known");
  add("cost", "gpu_hour_cost", number(s.gpu_hour_cost), "per GPU-hour, in the site's currency; 0 = not known");
  const SiteCalibration& c = s.calibration;
  if (c.present()) {
    add("calibration", "date", quoted(c.date), "UTC");
    add("calibration", "hosts", string_list(c.hosts));
    add("calibration", "slurm_job_id", quoted(c.slurm_job_id), "empty outside Slurm");
    add("calibration", "axonn_version", quoted(c.axonn_version));
    if (c.ranks > 0) add("calibration", "ranks", std::to_string(c.ranks));
    if (c.ranks_per_node > 0) add("calibration", "ranks_per_node", std::to_string(c.ranks_per_node));
    add("calibration", "device", quoted(c.device));
  }
  for (const SiteTier& tier : kSiteTiers) {
    for (const CollectiveKind kind : kCalibratedKinds)
      if (const auto& fit = (s.*tier.fits)[static_cast<size_t>(kind)]; fit && fit->residual)
        add(std::string("calibration.residual.") + tier.key, collective_name(kind), number(*fit->residual),
            "RMS of (measured - fit) / measured");
    if (const std::string groups = group_residuals_value(s.*tier.groups); !groups.empty())
      add(std::string("calibration.residual.") + tier.key, "groups", groups, "the groups' fits' residuals");
  }
  return keys;
}

std::string format_site_toml(const SiteConfig& site, const std::string& header) {
  std::string out;
  for (size_t start = 0; start <= header.size() && !header.empty();) {
    const size_t end = header.find('\n', start);
    out += "# " + header.substr(start, end == std::string::npos ? std::string::npos : end - start) + "\n";
    if (end == std::string::npos) break;
    start = end + 1;
  }
  std::string table;
  for (const SiteKey& key : site_keys(site)) {
    if (key.table != table) {
      table = key.table;
      out += "\n[" + table + "]\n";
    }
    out += key.name + " = " + key.value + (key.comment.empty() ? "" : "  # " + key.comment) + "\n";
  }
  return out;
}

std::vector<std::string> site_differences(const SiteConfig& before, const SiteConfig& after) {
  const auto old_keys = site_keys(before), new_keys = site_keys(after);
  auto id = [](const SiteKey& k) { return "[" + k.table + "] " + k.name; };
  auto shown = [](const SiteKey& k) { return k.summary.empty() ? k.value : k.summary; };
  std::map<std::string, const SiteKey*> old_by_id, new_by_id;
  for (const SiteKey& k : old_keys) old_by_id[id(k)] = &k;
  for (const SiteKey& k : new_keys) new_by_id[id(k)] = &k;
  std::vector<std::string> lines;
  for (const SiteKey& k : new_keys) {
    const auto it = old_by_id.find(id(k));
    if (it == old_by_id.end())
      lines.push_back(id(k) + ": (absent) -> " + shown(k));
    else if (it->second->value != k.value)
      lines.push_back(id(k) + ": " + shown(*it->second) + " -> " + shown(k));
  }
  for (const SiteKey& k : old_keys)
    if (!new_by_id.count(id(k))) lines.push_back(id(k) + ": " + shown(k) + " -> (absent)");
  return lines;
}

}  // namespace axonn
