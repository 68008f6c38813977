// The text of `axonn layout --scan`: a header naming what was priced, one row per GPU count,
// the knee line, and what the energy and cost columns count.
#include <algorithm>

#include "runner/scan/layout_scan.hpp"
#include "core/number_text.hpp"

namespace axonn {
namespace {

// "9.3 s", "42 min", "13.5 h", "7.7 d": a training run's length at a glance.
std::string duration(double s) {
  if (s < 120) return format_number("%.1f s", s);
  if (s < 3600) return format_number("%.0f min", s / 60);
  if (s < 48 * 3600) return format_number("%.1f h", s / 3600);
  return format_number("%.1f d", s / 86400);
}

std::string rejection_list(const std::vector<Rejection>& rejected) {
  std::string s;
  for (const Rejection& r : rejected) s.append(s.empty() ? "" : "; ").append(format_layout(r.layout) + ": " + r.reason);
  return s;
}

// rows is not empty.
std::string knee_line(const LayoutScan& scan) {
  if (scan.rows.size() < 2) return "no knee: it takes two GPU counts where a layout fits\n";
  const std::string first = std::to_string(scan.rows.front().gpus);
  const std::string per_gpu = format_number("%.1f", scan.rows.front().tokens_per_s_per_gpu);
  if (!scan.knee)
    return "no knee: at every count each added GPU bought at least half (" +
           format_number("%.1f", 0.5 * scan.rows.front().tokens_per_s_per_gpu) + " tokens/s) the " + per_gpu +
           " tokens/s per GPU at " + first + " GPUs\n";
  const ScanKnee& k = *scan.knee;
  const ScanRow &before = scan.rows[k.row - 1], &at = scan.rows[k.row];
  const Candidate &best_before = *scan.counts[scan.fitting[k.row - 1]].best,
                  &best_at = *scan.counts[scan.fitting[k.row]].best;
  std::string s = "knee at " + std::to_string(at.gpus) + " GPUs: each of the " + std::to_string(at.gpus - before.gpus) +
                  " GPUs added since " + std::to_string(before.gpus) + " bought " + format_number("%.1f", k.marginal) +
                  " tokens/s, under half (" + format_number("%.1f", k.threshold) + ") the " + per_gpu +
                  " tokens/s per GPU at " + first + " GPUs; ";
  if (k.growing_axis) {
    // Group size and link tier say why: more members in the ring, or a slower link crossed.
    const auto a = static_cast<size_t>(*k.growing_axis);
    const auto groups = [a](const Candidate& c) {
      return std::to_string(c.volume.group_size[a]) + " over " + link_tier_name(c.cost.link[a]);
    };
    s += "the " + comm_axis_name(*k.growing_axis) + " axis's communication grows most there, " +
         format_number("%.3g", k.comm_before_s) + " -> " + format_number("%.3g", k.comm_after_s) +
         " s per step, its groups of " + groups(best_before) + " -> " + groups(best_at) + " links";
  } else {
    s += "no axis's communication grows there (" + format_number("%.3g", best_before.cost.comm_total_s()) + " -> " +
         format_number("%.3g", best_at.cost.comm_total_s()) + " s per step; compute " +
         format_number("%.3g", best_before.cost.compute_s) + " -> " + format_number("%.3g", best_at.cost.compute_s) +
         " s)";
  }
  return s + "; best layouts " + format_layout_with_order(best_before.layout) + " -> " +
         format_layout_with_order(best_at.layout) + "\n";
}

}  // namespace

std::string format_layout_scan(const LayoutScan& scan) {
  const ScanJob& p = scan.prices;
  std::string s = "site " + scan.site + ", job " + scan.job + ": " + std::to_string(scan.gpus_per_node) +
                  " GPUs per node (" + scan.per_node_from + "); " + std::to_string(scan.global_batch) +
                  " sequences x " + std::to_string(scan.sequence) +
                  " tokens = " + format_number("%.0f", p.tokens_per_step) + " tokens per step, " +
                  std::to_string(p.steps) + " steps (training.steps)\n";
  const bool energy = p.gpu_power_watts > 0, cost = p.gpu_hour_cost > 0;
  const std::string vs = scan.rows.empty() ? "vs first" : "vs " + std::to_string(scan.rows.front().gpus);
  std::vector<std::string> header = {"GPUs",         "nodes", "best layout",        "recompute", "step s", "tokens/s",
                                     "tokens/s/GPU", vs,      "added tokens/s/GPU", "train"};
  if (energy) header.push_back("energy kWh");
  if (cost) header.push_back("cost/Mtoken");
  std::vector<std::vector<std::string>> cells = {header};
  size_t row = 0;
  for (const ScanCount& count : scan.counts) {
    auto& line = cells.emplace_back();
    line = {std::to_string(count.gpus), std::to_string(count.nodes)};
    if (!count.best) continue;
    const ScanRow& r = scan.rows[row++];
    line.insert(line.end(),
                {format_layout_with_order(count.best->layout), recompute_name(count.best->recompute),
                 format_number("%.3f", r.step_s), format_number("%.0f", r.tokens_per_s),
                 format_number("%.1f", r.tokens_per_s_per_gpu), format_number("%.2f", r.per_gpu_vs_first),
                 r.marginal_tokens_per_s_per_gpu ? format_number("%.1f", *r.marginal_tokens_per_s_per_gpu) : "-",
                 duration(r.train_s)});
    if (energy) line.push_back(format_number("%.0f", *r.energy_kwh));
    if (cost) line.push_back(format_number("%.4g", *r.cost_per_million_tokens));
  }
  // Right-aligned columns, each one wider than its widest cell.
  std::vector<size_t> widths(header.size(), 0);
  for (const auto& line : cells)
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size() + 2);
  for (size_t i = 0; i < cells.size(); ++i) {
    for (size_t c = 0; c < cells[i].size(); ++c) s += pad_left(cells[i][c], widths[c]);
    const ScanCount* count = i > 0 ? &scan.counts[i - 1] : nullptr;
    if (count && !count->best) {
      s += "  no layout fits: " + count->why;
      if (!count->rejected.empty())
        s += "\n" + std::string(widths[0] + widths[1] + 2, ' ') + "rejected (first " +
             std::to_string(count->rejected.size()) + " of " + std::to_string(count->rejected_total) +
             " size tuples): " + rejection_list(count->rejected);
    }
    if (count && scan.knee && count == &scan.counts[scan.fitting[scan.knee->row]]) s += "  <- knee";
    s += '\n';
  }
  if (!scan.rows.empty()) s += knee_line(scan);
  s += "step times are the layout model's predictions (overlapped collectives hidden by the fraction the site measured, none where it has none)";
  if (energy)
    s += "; energy: to train, GPUs only (" + format_number("%g", p.gpu_power_watts) +
         " W each; no CPUs, network or cooling)";
  if (cost) s += "; cost: " + format_number("%g", p.gpu_hour_cost) + " per GPU-hour";
  if (!energy && !cost)
    s += "; site " + scan.site + " sets no cost.gpu_power_watts or cost.gpu_hour_cost, so no energy or cost column";
  else if (!energy)
    s += "; site " + scan.site + " sets no cost.gpu_power_watts, so no energy column";
  else if (!cost)
    s += "; site " + scan.site + " sets no cost.gpu_hour_cost, so no cost column";
  return s + "\n";
}

}  // namespace axonn
