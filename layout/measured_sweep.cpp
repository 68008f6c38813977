#include "layout/measured_sweep.hpp"

#include <cmath>

namespace axonn {

std::optional<double> MeasuredSweep::seconds_at(double bytes, int group_size) const {
  if (group_size != ranks || points.empty() || bytes < points.front().bytes || bytes > points.back().bytes)
    return std::nullopt;
  size_t hi = 0;
  while (points[hi].bytes < bytes) ++hi;
  if (points[hi].bytes == bytes || hi == 0) return points[hi].seconds;
  const SweepPoint& a = points[hi - 1];
  const SweepPoint& b = points[hi];
  const double t = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
  return std::exp(std::log(a.seconds) + t * (std::log(b.seconds) - std::log(a.seconds)));
}

}  // namespace axonn
