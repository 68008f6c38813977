#pragma once
// Mean seconds of repeated runs, calibrate's measure of compute and of collectives.
#include <chrono>

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

}  // namespace axonn
