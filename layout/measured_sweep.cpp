#include "layout/measured_sweep.hpp"

#include <cmath>

namespace axonn {

std::optional<double> MeasuredSweep::seconds_at(double bytes, int group_size) const {
  if (group_size != ranks || points.empty() || bytes < points.front().bytes || bytes > points.back().bytes)
    return std::nullopt;
  size_t hi = 0;
  while (points[hi].bytes < bytes) ++hi;
  if (points[hi].bytes == bytes) return points[hi].seconds;  // hi > 0 below: bytes >= the first size
  const SweepPoint& a = points[hi - 1];
  const SweepPoint& b = points[hi];
  const double t = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
  return a.seconds * std::pow(b.seconds / a.seconds, t);
}

}  // namespace axonn
