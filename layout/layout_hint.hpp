#pragma once
// When no layout of a job's rank count fits: the smallest change that would make one fit.
//
// Bounded by construction: the layouts that divide the job are built from the divisors of
// its dimensions (hidden, heads, vocab, global batch), never by scanning rank counts, and at
// most kHintSplitBudget of them are tried; micro-batch sizes are tried only at the divisors
// of the global batch (the only sizes a rank ever runs).
#include <cstdint>
#include <string>

#include "layout/layout_inputs.hpp"

namespace axonn {

// The largest rank count the chooser and the hint consider (16,777,216).
inline constexpr int kMaxWorld = 1 << 24;
// Splits (data, x, y, z) of the job's dimensions the hint tries at most; a GPT-2-sized job has
// about ten thousand.
inline constexpr int64_t kHintSplitBudget = int64_t{1} << 20;

// Empty if a layout fits now. Otherwise, by what stops every layout of this rank count:
//  - memory: "needs >= 16 GPUs (2 nodes of 8) or micro_batch <= 2 or training.recompute =
//    \"block\"" (the fewest whole nodes on which a layout runs, the largest micro-batch with
//    which one runs on these, and, when the job names a recompute mode, the least
//    recomputation beyond it with which one runs, and when it turns optimizer sharding off,
//    sharding, if one then runs; "auto" has tried them all already);
//  - divisibility: "no data x X x Y x Z split of 8000 ranks divides the job (e.g. 8000x1x1x1:
//    global_batch=512 is not divisible by G_data*G_z=8000); the nearest GPU counts on which a
//    layout runs: 6144 GPUs (768 nodes of 8) and 8192 GPUs (1024 nodes of 8)";
//  - site policy: the same, blaming the policy.
// Each says so when the bounded search found nothing.
std::string smallest_fitting_change(const ChooserInput& input);

}  // namespace axonn
