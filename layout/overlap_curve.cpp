#include "layout/overlap_curve.hpp"

#include <cmath>

#include "core/number_text.hpp"

namespace axonn {

OverlapCurve OverlapCurve::flat(double fraction) {
  OverlapCurve curve;
  if (fraction != 0) curve.points.push_back({0, fraction});
  return curve;
}

double OverlapCurve::at(double bytes) const {
  if (points.empty()) return 0;
  if (bytes <= points.front().bytes) return points.front().fraction;
  if (bytes >= points.back().bytes) return points.back().fraction;
  size_t hi = 1;
  while (points[hi].bytes < bytes) ++hi;
  const OverlapPoint& a = points[hi - 1];
  const OverlapPoint& b = points[hi];
  // a.bytes > 0 here: a flat curve's one point returned above.
  const double t = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
  return a.fraction + t * (b.fraction - a.fraction);
}

bool OverlapCurve::costs_somewhere() const {
  for (const OverlapPoint& p : points)
    if (p.fraction < 0) return true;
  return false;
}

std::string overlap_curve_text(const OverlapCurve& curve) {
  if (curve.points.empty()) return "0";
  if (curve.is_flat()) return format_number("%.2f", curve.points[0].fraction);
  std::string out;
  for (const OverlapPoint& p : curve.points)
    out += (out.empty() ? "" : ", ") + format_number("%.2f", p.fraction) + " at " + bytes_text(p.bytes);
  return out;
}

}  // namespace axonn
