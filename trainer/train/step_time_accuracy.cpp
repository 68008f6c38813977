#include "trainer/train/step_time_accuracy.hpp"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

namespace axonn {

double StepTimeAccuracy::median_step_s() const {
  if (measured_s_.empty()) return 0;
  std::vector<double> v = measured_s_;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double StepTimeAccuracy::ratio() const {
  return predicted_s_ > 0 && !measured_s_.empty() ? median_step_s() / predicted_s_ : 0;
}

std::optional<std::string> StepTimeAccuracy::warning_due() {
  if (warned_ || static_cast<int64_t>(measured_s_.size()) < kStepsBeforeWarning || predicted_s_ <= 0)
    return std::nullopt;
  const double r = ratio();
  if (r >= kLowestRatio && r <= kHighestRatio) return std::nullopt;
  warned_ = true;
  return fmt::format(
      "train: the median step of {} steps took {:.4g} s, {:.2f}x the {:.4g} s the layout model predicts (outside "
      "[{}, {}]): the site's figures do not describe this machine, so the chooser's ranking of layouts may be wrong; "
      "measure them with `axonn calibrate` and pass the result with --site",
      measured_s_.size(), median_step_s(), r, predicted_s_, kLowestRatio, kHighestRatio);
}

}  // namespace axonn
