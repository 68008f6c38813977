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
      "a copy paused training {:.1f} ms, slowed the steps beside it by {:.1f} ms and wrote and sent for {:.1f} ms, "
      "with steps of {:.1f} ms",
      1e3 * cost.pause_s, 1e3 * std::max(0.0, cost.slowdown_s), 1e3 * cost.background_s, 1e3 * cost.step_s);
}

std::string describe_copy_steps(const std::vector<int64_t>& steps) {
  std::string out = steps.size() == 1 ? "step " : "steps ";
  for (size_t i = 0; i < steps.size(); ++i)
    out += (i == 0 ? "" : i + 1 == steps.size() ? " and " : ", ") + std::to_string(steps[i]);
  return out;
}

std::string describe_memory_interval(std::optional<int> fixed) {
  if (fixed) return fmt::format("every {} step{}", *fixed, *fixed == 1 ? "" : "s");
  return fmt::format(
      "as often as keeps them within {:.0f}% of training time (checkpoint.memory_interval = \"auto\": "
      "measured over its first copies)",
      100 * kMemoryCopyBudget);
}

MemoryCopySchedule::MemoryCopySchedule(std::optional<int> configured, int64_t start_step)
    : interval_(configured), automatic_(!configured), start_step_(start_step) {}

CalibrationStep MemoryCopySchedule::boundary(int64_t step, bool copy_running) {
  if (!calibrating()) return CalibrationStep::none;
  const CalibrationStep measured = step == start_step_ + 1 ? CalibrationStep::none : next_;
  boundary_step_ = step;
  copy_running_ = copy_running;
  const bool copy_due = copy_steps_.size() < kCalibrationCopies && !copy_running && step > start_step_ + 1 &&
                        measured == CalibrationStep::without_copy;
  if (copy_due) copy_steps_.push_back(step);
  next_ = copy_due || copy_running ? CalibrationStep::beside_copy : CalibrationStep::without_copy;
  return measured;
}

bool MemoryCopySchedule::due(int64_t step) const {
  if (!automatic_) return step % *interval_ == 0;
  if (!interval_) return !copy_steps_.empty() && copy_steps_.back() == step;
  const int64_t last = copy_steps_.back();
  return step > last && (step - last) % *interval_ == 0;
}

int64_t MemoryCopySchedule::next_copy(int64_t step) const {
  const int64_t k = interval_.value_or(1);
  const int64_t origin = automatic_ && !copy_steps_.empty() ? copy_steps_.back() : 0;
  if (step <= origin) return origin + k;
  return origin + (step - origin + k - 1) / k * k;
}

void CopyCalibration::add(CalibrationStep kind, double step_s, bool beside_disk_save) {
  if (kind == CalibrationStep::without_copy) {
    without_all_.add(step_s);
    if (!beside_disk_save) without_.add(step_s);
  }
  if (kind == CalibrationStep::beside_copy) {
    beside_all_.add(step_s);
    if (!beside_disk_save) beside_.add(step_s);
  }
}

double CopyCalibration::step_s() const { return clean() ? without_.mean() : without_all_.mean(); }

double CopyCalibration::slowdown_s(int copies) const {
  if (copies < 1) return 0.0;
  const double per_step = (clean() ? beside_.mean() : beside_all_.mean()) - step_s();
  return per_step * beside_all_.n / copies;
}

}  // namespace axonn
