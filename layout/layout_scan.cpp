#include "layout/layout_scan.hpp"

#include <stdexcept>
#include <string>

namespace axonn {

std::vector<ScanRow> scan_rows(const std::vector<ScanPoint>& points, const ScanJob& job) {
  std::vector<ScanRow> rows;
  for (size_t i = 0; i < points.size(); ++i) {
    const ScanPoint& p = points[i];
    if (p.gpus <= 0 || !(p.step_s > 0))
      throw std::invalid_argument("scan_rows: point " + std::to_string(i) + " has gpus " + std::to_string(p.gpus) +
                                  " and step " + std::to_string(p.step_s) + " s; both must be positive");
    if (i > 0 && p.gpus <= points[i - 1].gpus)
      throw std::invalid_argument("scan_rows: GPU counts must increase, got " + std::to_string(points[i - 1].gpus) +
                                  " then " + std::to_string(p.gpus));
    ScanRow r;
    r.gpus = p.gpus;
    r.step_s = p.step_s;
    r.tokens_per_s = job.tokens_per_step / p.step_s;
    r.tokens_per_s_per_gpu = r.tokens_per_s / p.gpus;
    r.per_gpu_vs_first = rows.empty() ? 1.0 : r.tokens_per_s_per_gpu / rows.front().tokens_per_s_per_gpu;
    if (!rows.empty())
      r.marginal_tokens_per_s_per_gpu = (r.tokens_per_s - rows.back().tokens_per_s) / (p.gpus - rows.back().gpus);
    r.train_s = static_cast<double>(job.steps) * p.step_s;
    const double gpu_hours_per_s = p.gpus / 3600.0;
    if (job.gpu_power_watts > 0) r.energy_kwh = job.gpu_power_watts / 1000.0 * gpu_hours_per_s * r.train_s;
    if (job.gpu_hour_cost > 0) r.cost_per_million_tokens = job.gpu_hour_cost * gpu_hours_per_s * 1e6 / r.tokens_per_s;
    rows.push_back(r);
  }
  return rows;
}

std::optional<ScanKnee> find_knee(const std::vector<ScanPoint>& points, const std::vector<ScanRow>& rows) {
  if (points.size() != rows.size())
    throw std::invalid_argument("find_knee: " + std::to_string(points.size()) + " points but " +
                                std::to_string(rows.size()) + " rows");
  if (rows.size() < 2) return std::nullopt;
  const double threshold = 0.5 * rows.front().tokens_per_s_per_gpu;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (!(*rows[i].marginal_tokens_per_s_per_gpu < threshold)) continue;
    ScanKnee knee;
    knee.row = i;
    knee.marginal = *rows[i].marginal_tokens_per_s_per_gpu;
    knee.threshold = threshold;
    double most_growth = 0;
    for (int a = 0; a < kCommAxisCount; ++a) {
      const auto ai = static_cast<size_t>(a);
      const double growth = points[i].comm_s[ai] - points[i - 1].comm_s[ai];
      if (growth <= most_growth) continue;
      most_growth = growth;
      knee.growing_axis = static_cast<CommAxis>(a);
      knee.comm_before_s = points[i - 1].comm_s[ai];
      knee.comm_after_s = points[i].comm_s[ai];
    }
    return knee;
  }
  return std::nullopt;
}

}  // namespace axonn
