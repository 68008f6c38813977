#pragma once
// Timing helpers every benchmark uses: wall seconds since a point and the median of repeated
// measurements (core's, here under axonn::bench too), a quantile (the nearest rank), and an
// interval for the median that assumes no distribution.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "core/median.hpp"
#include "core/wall_clock.hpp"

namespace axonn::bench {

using Clock = WallClock;
using axonn::median;
using axonn::seconds_since;

// The q-quantile (0 <= q <= 1) of `v`, non-empty: the value at rank round(q * (size - 1)).
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// The sign test's interval for the median of `v`: sorted, [v(k), v(n + 1 - k)] (ranks from 1)
// for the largest k whose tail P(B < k), B ~ Binomial(n, 1/2), is at most (1 - confidence) / 2,
// so that it holds the median with at least `confidence` whatever the distribution. nullopt
// where there are too few values for any k (under 5 at 0.9: P(B = 0) = 1/16 > 5% at n = 4).
inline std::optional<std::pair<double, double>> median_interval(std::vector<double> v, double confidence) {
  const size_t n = v.size();
  const double tail_allowed = (1.0 - confidence) / 2.0;
  double tail = 0;  // P(B <= j) for the j reached
  size_t k = 0;
  const double count = static_cast<double>(n);
  for (size_t j = 0; 2 * j < n; ++j) {
    // C(n, j) / 2^n, through logarithms: exact enough for any n a benchmark repeats.
    const double below = static_cast<double>(j);
    tail += std::exp(std::lgamma(count + 1) - std::lgamma(below + 1) - std::lgamma(count - below + 1) -
                     count * std::log(2.0));
    if (tail > tail_allowed) break;
    k = j + 1;
  }
  if (k == 0) return std::nullopt;
  std::sort(v.begin(), v.end());
  return std::pair{v[k - 1], v[n - k]};
}

}  // namespace axonn::bench
