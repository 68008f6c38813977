#pragma once
// The median of repeated measurements (calibrate's and the benchmarks' times): robust to the
// few runs a shared machine slows down, which a mean is not.
#include <algorithm>
#include <vector>

namespace axonn {

// The middle value, or the mean of the two middle ones; `values` must not be empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace axonn
