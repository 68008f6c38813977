#pragma once
// Where a training step's time goes, op by op: the trainer runs on a TimedBackend (which
// synchronizes after every op, so on a GPU each op's own time is measured), 2 untimed steps,
// then `steps` timed ones. Each op's time is that of its fastest step (a shared machine slows
// some steps down); the step time is the median. Used by `bench_train_cpu --profile` and
// `bench_train_gpu --profile`.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_stats.hpp"
#include "timed_backend.hpp"
#include "trainer/train/trainer.hpp"

namespace axonn::bench {

// trainer: built on `timed`. end_step: called after each step (the GPU side waits for its
// device there), inside the step's time.
inline void print_op_profile(TimedBackend& timed, Trainer& trainer, int steps,
                             const std::function<void()>& end_step = [] {}) {
  for (int s = 0; s < 2; ++s) {
    trainer.train_step();
    end_step();
  }
  std::vector<double> step_times, outside_ops;
  std::map<std::string, TimedBackend::Total> best;
  for (int s = 0; s < steps; ++s) {
    timed.reset();
    const auto start = Clock::now();
    trainer.train_step();
    end_step();
    step_times.push_back(seconds_since(start));
    double in_ops = 0;
    for (const auto& [name, t] : timed.totals()) {
      in_ops += t.seconds;
      if (best.count(name) == 0 || t.seconds < best[name].seconds) best[name] = t;
    }
    outside_ops.push_back(step_times.back() - in_ops);
  }
  const double step_s = median(step_times);

  std::vector<std::pair<std::string, TimedBackend::Total>> ops(best.begin(), best.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::printf("profile: %.1f ms per step (median of %d steps, %.1f..%.1f), per backend op (its fastest step):\n",
              1e3 * step_s, steps, 1e3 * *std::min_element(step_times.begin(), step_times.end()),
              1e3 * *std::max_element(step_times.begin(), step_times.end()));
  std::printf("  %-28s %9s %10s %7s %10s\n", "op", "calls", "ms/step", "share", "GFLOP/s");
  double ops_s = 0;
  for (const auto& [name, t] : ops) {
    ops_s += t.seconds;
    std::printf("  %-28s %9lld %10.2f %6.1f%%", name.c_str(), static_cast<long long>(t.calls), 1e3 * t.seconds,
                100.0 * t.seconds / step_s);
    if (t.flops > 0) std::printf(" %10.1f", t.flops / t.seconds / 1e9);
    std::printf("\n");
  }
  std::printf("  %-28s %9s %10.2f %6.1f%%\n", "sum of the ops", "", 1e3 * ops_s, 100.0 * ops_s / step_s);
  std::printf("  %-28s %9s %10.2f %6.1f%%   (median over steps: host code, collectives)\n", "outside the ops", "",
              1e3 * median(outside_ops), 100.0 * median(outside_ops) / step_s);
}

}  // namespace axonn::bench
