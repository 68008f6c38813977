#include "runner/scan/layout_scan.hpp"

#include "layout/layout_hint.hpp"

namespace axonn {
namespace {

// How many of a count's rejections the scan shows when none fits: the chooser's order puts the
// check that failed first and, within a check, the smallest product or memory need first.
constexpr size_t kShownRejections = 3;

ScanCount choose_at(const SiteConfig& site, const JobConfig& job, int gpus, int gpus_per_node) {
  ScanCount count;
  count.gpus = gpus;
  count.nodes = gpus / gpus_per_node;
  const ChooserInput input = chooser_input(site, job, count.nodes, gpus_per_node);
  ChooserResult result = choose_layout(input);
  if (result.fits()) {
    count.best = std::move(result.ranked.front());
    return count;
  }
  count.why = smallest_fitting_change(input);
  for (size_t i = 0; i < result.rejected.size() && i < kShownRejections; ++i)
    count.rejected.push_back(result.rejected[i]);
  count.rejected_total = result.rejected.size();
  return count;
}

}  // namespace

LayoutScan scan_layouts(const SiteConfig& site, const JobConfig& job, const std::string& job_path,
                        const std::vector<int>& counts, int gpus_per_node, const std::string& per_node_from) {
  LayoutScan scan;
  scan.site = site.name;
  scan.job = job_path;
  scan.gpus_per_node = gpus_per_node;
  scan.per_node_from = per_node_from;
  scan.global_batch = job.training.global_batch;
  scan.sequence = job.model.sequence;
  scan.prices.tokens_per_step = static_cast<double>(job.training.global_batch) * job.model.sequence;
  scan.prices.steps = job.training.steps;
  scan.prices.gpu_power_watts = site.gpu_power_watts;
  scan.prices.gpu_hour_cost = site.gpu_hour_cost;
  for (int gpus : counts) {
    scan.counts.push_back(choose_at(site, job, gpus, gpus_per_node));
    const ScanCount& count = scan.counts.back();
    if (!count.best) continue;
    scan.fitting.push_back(scan.counts.size() - 1);
    scan.points.push_back(ScanPoint{gpus, count.best->cost.step_s(), count.best->cost.comm_s});
  }
  scan.rows = scan_rows(scan.points, scan.prices);
  scan.knee = find_knee(scan.points, scan.rows);
  return scan;
}

}  // namespace axonn
