#pragma once
// Timing helpers every benchmark uses: wall seconds since a point, and the median of repeated
// measurements (odd counts take the middle one, even counts the mean of the middle two).
#include <algorithm>
#include <chrono>
#include <vector>

namespace axonn::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace axonn::bench
