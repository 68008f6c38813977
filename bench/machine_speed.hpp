#pragma once
// How fast this machine is right now: every core running its own single-threaded sgemm of
// 256^3 (the size class of the CPU benchmark jobs' GEMMs) for a window, the total FLOP/s.
//
// Why: on a shared VM the cores are taken away for seconds to minutes at a time (2 cores:
// 30 to 60 GFLOP/s together from one second to the next). A benchmark that compares a model
// calibrated at one moment with runs at another brackets both with this probe, so that the
// machine's drift between them is measured beside the model's error instead of inside it.
#include <cblas.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "bench_stats.hpp"

namespace axonn::bench {

inline double machine_flops(double window_s = 0.3) {
  openblas_set_num_threads(1);  // each thread runs its own sgemm
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<double> flops(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&flops, t, window_s] {
      const int n = 256;
      const std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f);
      std::vector<float> c(n * n);
      int runs = 0;
      const Clock::time_point start = Clock::now();
      do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                    n);
        ++runs;
      } while (seconds_since(start) < window_s);
      flops[static_cast<size_t>(t)] = 2.0 * n * n * n * runs / seconds_since(start);
    });
  for (std::thread& w : workers) w.join();
  double total = 0;
  for (double f : flops) total += f;
  return total;
}

}  // namespace axonn::bench
