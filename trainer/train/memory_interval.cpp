#include "trainer/train/memory_interval.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace axonn {
namespace {

// ceil(a / b) as a step count, at most a million steps.
int steps_for(double a, double b) { return static_cast<int>(std::min(1e6, std::ceil(a / b))); }

}  // namespace

int memory_interval_for(const CopyCost& cost) {
  if (!(cost.step_s > 0)) return 1;
  const double per_copy = cost.pause_s + std::max(0.0, cost.slowdown_s);
  const int within_budget = steps_for(per_copy, kMemoryCopyBudget * cost.step_s);
  const int copy_ends_first = steps_for(cost.background_s, cost.step_s);
  return std::max({1, within_budget, copy_ends_first});
}

std::string describe_copy_cost(const CopyCost& cost) {
  return fmt::format(
      "a copy paused training {:.1f} ms, slowed the step beside it by {:.1f} ms and wrote and sent for {:.1f} ms, "
      "with steps of {:.1f} ms",
      1e3 * cost.pause_s, 1e3 * std::max(0.0, cost.slowdown_s), 1e3 * cost.background_s, 1e3 * cost.step_s);
}

std::string describe_memory_interval(std::optional<int> fixed) {
  if (fixed) return fmt::format("every {} step{}", *fixed, *fixed == 1 ? "" : "s");
  return fmt::format(
      "as often as keeps them within {:.0f}% of training time (checkpoint.memory_interval = \"auto\": "
      "measured over its first copies)",
      100 * kMemoryCopyBudget);
}

MemoryCopySchedule::MemoryCopySchedule(std::optional<int> configured, int64_t start_step)
    : interval_(configured),
      automatic_(!configured),
      first_calibration_(start_step + 2),
      last_calibration_(deciding_step(start_step) - 1) {}

bool MemoryCopySchedule::calibrates_without_copy(int64_t step) const {
  return calibrating(step) && step <= last_calibration_ && (step - first_calibration_) % 2 == 0;
}

bool MemoryCopySchedule::calibrates_beside_copy(int64_t step) const {
  return calibrating(step) && step <= last_calibration_ + 1 && (step - first_calibration_) % 2 == 1;
}

bool MemoryCopySchedule::due(int64_t step) const {
  if (!automatic_) return step % *interval_ == 0;
  if (!interval_) return calibrates_without_copy(step);
  return step > last_calibration_ && (step - last_calibration_) % *interval_ == 0;
}

void CopyCalibration::add(const MemoryCopySchedule& schedule, int64_t step, double step_s, bool beside_disk_save) {
  if (schedule.calibrates_without_copy(step)) {
    without_all_.add(step_s);
    if (!beside_disk_save) without_.add(step_s);
  }
  if (schedule.calibrates_beside_copy(step)) {
    beside_all_.add(step_s);
    if (!beside_disk_save) beside_.add(step_s);
  }
}

double CopyCalibration::step_s() const { return clean() ? without_.mean() : without_all_.mean(); }

double CopyCalibration::slowdown_s() const { return (clean() ? beside_.mean() : beside_all_.mean()) - step_s(); }

}  // namespace axonn
