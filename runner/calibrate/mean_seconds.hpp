#pragma once
// How calibrate times repeated runs of compute and of collectives: the mean of the runs within
// a window or count, and the median of passes taken in turns.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "core/median.hpp"

namespace axonn {

// Mean seconds of `repetitions` back-to-back runs of `run` (which waits for its work), after
// one untimed: their total time over their count. Not a median: where a node's ranks share
// its cores (CPU ranks, more of them than cores), time-slicing is part of what each rank gets
// in training, and a median picks the short runs that had a core to themselves (it reported
// twice the rate the node has for 8 ranks on 2 cores).
template <class Run>
double mean_seconds(Run run, int repetitions) {
  run();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repetitions; ++i) run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repetitions;
}

// Mean seconds of the back-to-back runs of `run` that start within `window_s` of the first
// (at least `min_runs` of them), none untimed: their total time over their count. When every
// rank of a node times its compute this way, started together, all of them compute until
// their windows end, so each shares the cores with the same neighbours throughout. A fixed
// count instead lets the ranks that finish first leave the cores to the others, whose rate
// then depends on the order they happened to run in. (4 CPU ranks on 2 cores, 2 pretend
// nodes, the wide job's GEMMs: 7.3 to 13.9 GFLOP/s per rank in four calibrations with a
// fixed count, 7.7 to 11.6 in three with the window; the machine's own variation remains.)
template <class Run>
double mean_seconds_within(Run run, double window_s, int min_runs) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  int runs = 0;
  while (runs < min_runs || elapsed() < window_s) {
    run();
    ++runs;
  }
  return elapsed() / runs;
}

// How many times calibrate times each of its items (shapes, message sizes), in turns.
inline constexpr int kTimingPasses = 3;

// The runs of one pass where `repetitions` are to be split over kTimingPasses: at least 1.
inline int pass_repetitions(int repetitions) { return std::max(1, (repetitions + kTimingPasses - 1) / kTimingPasses); }

// For each of `items`: the median over `passes` of time_one(item), taken in turns (item 0,
// 1, ..., then again), so that the passes of one item lie seconds apart. Within a pass
// time_one takes a mean (time-slicing belongs in it, above); across passes the median, since a
// shared machine changes speed for seconds at a time: on a 2-core VM one thread's GEMM ran at
// 32 GFLOP/s in most 0.1 s windows and at 18-27 in runs of them up to 3 s long, while the
// neighbours took the cores. A single pass puts such a stretch into whichever items it
// happened to fall on, and the site keeps it for every job priced with it.
template <class TimeOne>
std::vector<double> median_over_passes(size_t items, int passes, TimeOne time_one) {
  std::vector<std::vector<double>> times(items);
  for (int pass = 0; pass < passes; ++pass)
    for (size_t i = 0; i < items; ++i) times[i].push_back(time_one(i));
  std::vector<double> medians;
  for (const std::vector<double>& t : times) medians.push_back(median(t));
  return medians;
}

}  // namespace axonn
