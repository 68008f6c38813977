#include "trainer/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace axonn {

double learning_rate(const TrainingConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / t.warmup_steps;
  if (t.schedule == "constant") return t.lr;
  const int64_t decay_steps = std::max<int64_t>(1, t.steps - t.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / static_cast<double>(decay_steps));
  return t.min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (t.lr - t.min_lr);
}

}  // namespace axonn
