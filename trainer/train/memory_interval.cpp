#include "trainer/train/memory_interval.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

namespace axonn {
namespace {

// ceil(a / b) as a step count, at most a million steps.
int steps_for(double a, double b) { return static_cast<int>(std::min(1e6, std::ceil(a / b))); }

// The slowdown a copy is charged: at its bound, and never below its mean or below nothing
// (a CopyCost made without a bound charges the mean).
double charged_slowdown_s(const CopyCost& cost) { return std::max({0.0, cost.slowdown_s, cost.slowdown_bound_s}); }

}  // namespace

int memory_interval_for(const CopyCost& cost) {
  if (!(cost.step_s > 0)) return 1;
  const double per_copy = cost.pause_s + charged_slowdown_s(cost);
  const int within_budget = steps_for(per_copy, kMemoryCopyBudget * cost.step_s);
  const int copy_ends_first = steps_for(cost.background_s, cost.step_s);
  return std::max({1, within_budget, copy_ends_first});
}

std::string describe_copy_cost(const CopyCost& cost) {
  return fmt::format(
      "a copy paused training {:.1f} ms, slowed the steps beside it by {:.1f} ms (at most {:.1f} ms at 95% "
      "confidence) and wrote and sent for {:.1f} ms, with steps of {:.1f} ms",
      1e3 * cost.pause_s, 1e3 * std::max(0.0, cost.slowdown_s), 1e3 * charged_slowdown_s(cost), 1e3 * cost.background_s,
      1e3 * cost.step_s);
}

double student_t_95(double dof) {
  // Upper 5% critical values of t for 1 to 30 degrees of freedom (e.g. NIST/SEMATECH
  // e-Handbook of Statistical Methods, section 1.3.6.7.2).
  static constexpr double kTable[] = {6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
                                      1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
                                      1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697};
  constexpr double kRows = std::size(kTable);
  return kTable[static_cast<size_t>(std::clamp(dof, 1.0, kRows)) - 1];
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

double CopyCalibration::Sample::variance() const {
  if (n < 2) return 0.0;
  return std::max(0.0, (sum_squares - sum * sum / n) / (n - 1));
}

double CopyCalibration::step_s() const { return without().mean(); }

double CopyCalibration::slowdown_s(int copies) const {
  if (copies < 1) return 0.0;
  return (beside().mean() - without().mean()) * beside_all_.n / copies;
}

double CopyCalibration::slowdown_bound_s(int copies) const {
  if (copies < 1) return 0.0;
  const Sample &b = beside(), &w = without();
  if (b.n < 2 || w.n < 2) return slowdown_s(copies);  // no spread to bound by
  const double vb = b.variance() / b.n, vw = w.variance() / w.n;
  if (vb + vw == 0) return slowdown_s(copies);
  // Welch-Satterthwaite: the degrees of freedom of the two spreads together.
  const double dof = (vb + vw) * (vb + vw) / (vb * vb / (b.n - 1) + vw * vw / (w.n - 1));
  return slowdown_s(copies) + student_t_95(dof) * std::sqrt(vb + vw) * beside_all_.n / copies;
}

}  // namespace axonn
