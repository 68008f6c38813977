#pragma once
// Scaling advice (`axonn layout --scan`): what one job's best layouts at a rising GPU count
// buy. Fed the chooser's best layout at each count, it works out throughput, the marginal
// gain of the GPUs added since the previous count, the time, energy and money to train, and
// the knee: the first count where an added GPU is worth less than half a GPU at the smallest
// count. Pure arithmetic on the predicted step times; no chooser call, no I/O.
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "layout/layout.hpp"

namespace axonn {

// The chooser's best layout at one GPU count, as the scan needs it.
struct ScanPoint {
  int gpus = 0;
  double step_s = 0;                            // predicted step time, > 0
  std::array<double, kCommAxisCount> comm_s{};  // of which each axis's communication (CostEstimate::comm_s)
};

// The job and the site's prices; a price of 0 is not known, and its column is left out.
struct ScanJob {
  double tokens_per_step = 0;  // global_batch x sequence
  int64_t steps = 0;           // training.steps
  double gpu_power_watts = 0;  // per GPU
  double gpu_hour_cost = 0;    // per GPU-hour, in the site's currency
};

struct ScanRow {
  int gpus = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double per_gpu_vs_first = 0;  // tokens_per_s_per_gpu / that of the first (smallest) count; 1 there
  // (tokens_per_s - the previous row's) / (gpus - the previous row's): what each GPU added
  // since the previous count bought. None on the first row.
  std::optional<double> marginal_tokens_per_s_per_gpu;
  double train_s = 0;                             // steps x step_s
  std::optional<double> energy_kwh;               // to train: gpus x watts x train_s (GPUs only)
  std::optional<double> cost_per_million_tokens;  // gpus x hourly price x (1e6 / tokens_per_s) / 3600
};

// One row per point. Points must have strictly increasing gpus and step_s > 0, else
// std::invalid_argument (a caller's bug: the CLI checks the counts first).
std::vector<ScanRow> scan_rows(const std::vector<ScanPoint>& points, const ScanJob& job);

struct ScanKnee {
  size_t row = 0;        // index of the knee's row (>= 1) in the points and rows
  double marginal = 0;   // that row's marginal tokens/s per added GPU
  double threshold = 0;  // half the first row's tokens/s per GPU
  // The axis whose predicted communication time grew most from the previous row's best
  // layout to the knee's; none when no axis's grew (compute shrank while communication did not).
  std::optional<CommAxis> growing_axis;
  double comm_before_s = 0;  // that axis's time per step at the previous row (0 without an axis)
  double comm_after_s = 0;   // and at the knee
};

// The first row whose marginal tokens/s per added GPU is below half the first row's tokens/s
// per GPU; none when every row's is at least that (or there are fewer than two rows).
// rows = scan_rows(points, ...).
std::optional<ScanKnee> find_knee(const std::vector<ScanPoint>& points, const std::vector<ScanRow>& rows);

}  // namespace axonn
