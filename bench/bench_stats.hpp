#pragma once
// Timing helpers every benchmark uses: wall seconds since a point, the median of repeated
// measurements (odd counts take the middle one, even counts the mean of the middle two), and
// a quantile (the nearest rank).
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

// The q-quantile (0 <= q <= 1) of `v`, non-empty: the value at rank round(q * (size - 1)).
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace axonn::bench
