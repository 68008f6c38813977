// `axonn layout --scan --json`: one object, built as a toml++ table and printed with its JSON
// formatter as `axonn layout --json` is. Keys whose value is not known are left out (the
// marginal gain on the first row, energy and cost without the site's figures, the knee when
// there is none), as `best` is left out of `axonn layout --json` when nothing fits.
#include <toml++/toml.h>

#include <sstream>

#include "runner/scan/layout_scan.hpp"

namespace axonn {
namespace {

toml::table axes_json(const std::array<double, kCommAxisCount>& comm_s) {
  toml::table axes;
  for (int a = 0; a < kCommAxisCount; ++a)
    axes.insert(comm_axis_name(static_cast<CommAxis>(a)), comm_s[static_cast<size_t>(a)]);
  return axes;
}

toml::table fitting_json(const ScanCount& count, const ScanRow& r) {
  const Candidate& best = *count.best;
  toml::table row{
      {"gpus", count.gpus},
      {"nodes", count.nodes},
      {"fits", true},
      {"best", format_layout_with_order(best.layout)},
      {"layout", format_layout(best.layout)},
      {"order", format_order(best.layout)},
      {"recompute", recompute_name(best.recompute)},
      {"shard_optimizer", best.shard_optimizer},
      {"step_time_s", r.step_s},
      {"compute_time_s", best.cost.compute_s},
      {"comm_time_s", best.cost.comm_total_s()},
      {"axes_comm_time_s", axes_json(best.cost.comm_s)},
      {"tokens_per_s", r.tokens_per_s},
      {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
      {"per_gpu_vs_first", r.per_gpu_vs_first},
      {"train_time_s", r.train_s},
  };
  if (r.marginal_tokens_per_s_per_gpu) row.insert("marginal_tokens_per_s_per_gpu", *r.marginal_tokens_per_s_per_gpu);
  if (r.energy_kwh) row.insert("energy_kwh", *r.energy_kwh);
  if (r.cost_per_million_tokens) row.insert("cost_per_million_tokens", *r.cost_per_million_tokens);
  return row;
}

toml::table unfit_json(const ScanCount& count) {
  toml::array rejected;
  for (const Rejection& r : count.rejected)
    rejected.push_back(toml::table{{"layout", format_layout(r.layout)}, {"reason", r.reason}});
  return toml::table{{"gpus", count.gpus},
                     {"nodes", count.nodes},
                     {"fits", false},
                     {"smallest_change", count.why},
                     {"rejected", std::move(rejected)},
                     {"rejected_total", static_cast<int64_t>(count.rejected_total)}};
}

}  // namespace

std::string layout_scan_json(const LayoutScan& scan) {
  toml::array rows;
  size_t fitting = 0;
  for (const ScanCount& count : scan.counts)
    rows.push_back(count.best ? fitting_json(count, scan.rows[fitting++]) : unfit_json(count));
  toml::table root{
      {"site", scan.site},
      {"job", scan.job},
      {"gpus_per_node", scan.gpus_per_node},
      {"tokens_per_step", scan.prices.tokens_per_step},
      {"steps", scan.prices.steps},
      {"rows", std::move(rows)},
  };
  if (scan.prices.gpu_power_watts > 0) root.insert("gpu_power_watts", scan.prices.gpu_power_watts);
  if (scan.prices.gpu_hour_cost > 0) root.insert("gpu_hour_cost", scan.prices.gpu_hour_cost);
  if (scan.knee) {
    const ScanKnee& k = *scan.knee;
    toml::table knee{
        {"gpus", scan.rows[k.row].gpus},
        {"previous_gpus", scan.rows[k.row - 1].gpus},
        {"marginal_tokens_per_s_per_gpu", k.marginal},
        {"threshold_tokens_per_s_per_gpu", k.threshold},
        {"best_before", format_layout_with_order(scan.counts[scan.fitting[k.row - 1]].best->layout)},
        {"best_at", format_layout_with_order(scan.counts[scan.fitting[k.row]].best->layout)},
    };
    if (k.growing_axis) {
      knee.insert("growing_axis", comm_axis_name(*k.growing_axis));
      knee.insert("comm_before_s", k.comm_before_s);
      knee.insert("comm_after_s", k.comm_after_s);
      const auto a = static_cast<size_t>(*k.growing_axis);
      const Candidate &before = *scan.counts[scan.fitting[k.row - 1]].best,
                      &at = *scan.counts[scan.fitting[k.row]].best;
      knee.insert("group_size_before", before.volume.group_size[a]);
      knee.insert("group_size_after", at.volume.group_size[a]);
      knee.insert("link_before", link_tier_name(before.cost.link[a]));
      knee.insert("link_after", link_tier_name(at.cost.link[a]));
    }
    root.insert("knee", std::move(knee));
  }
  std::ostringstream out;
  out << toml::json_formatter{root} << "\n";
  return out.str();
}

}  // namespace axonn
