#pragma once
// Measured step time against the layout model's prediction, over the steps of one run: the
// median ratio goes into summary.json, and a run whose median leaves [0.5, 2] after 20 steps
// is warned about once, since a chooser whose prices are that far off may pick the wrong
// layout at scale (the site's figures do not describe the machine: axonn calibrate measures
// them). The median, not the mean, so that a first step's one-time costs (allocation,
// cuBLAS plans, page faults) and a checkpoint's stall do not move it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace axonn {

class StepTimeAccuracy {
 public:
  static constexpr int64_t kStepsBeforeWarning = 20;
  static constexpr double kLowestRatio = 0.5, kHighestRatio = 2.0;

  explicit StepTimeAccuracy(double predicted_step_s) : predicted_s_(predicted_step_s) {}

  void add(double measured_step_s) { measured_s_.push_back(measured_step_s); }

  double predicted_step_s() const { return predicted_s_; }
  // The median measured step of the steps added; 0 before any.
  double median_step_s() const;
  // median_step_s / predicted; 0 before any step or without a prediction.
  double ratio() const;

  // The warning to log now, once per run: from the 20th step on, the first time the median
  // ratio is outside [0.5, 2]. Names both times, the ratio and the fix.
  std::optional<std::string> warning_due();

 private:
  double predicted_s_;
  std::vector<double> measured_s_;
  bool warned_ = false;
};

}  // namespace axonn
