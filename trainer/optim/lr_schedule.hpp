#pragma once
// The learning rate of each optimizer step: linear warmup to the peak, then cosine decay to
// min_lr at the last step ("cosine") or the peak held ("constant").
#include <cstdint>

#include "config/job_config.hpp"

namespace axonn {

// step: 0-based optimizer step. Warmup: lr·(step+1)/warmup_steps for step < warmup_steps.
double learning_rate(const TrainingConfig& training, int64_t step);

}  // namespace axonn
