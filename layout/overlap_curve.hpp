#pragma once
// How much of a collective's time running it beside compute hides, by the collective's size:
// what `axonn calibrate`'s overlap probe measures on a link tier (MeasuredTier::overlap, site
// key network.<tier>.overlap). A fraction is -1 to 1: 1 hides all of it, 0 nothing, below 0
// started beside compute the call costs that fraction of its time more than waited for.
//
// Why by size: what hides is the time a call waits on its links; a small call is mostly
// handoffs (its start, each ring step's wake-up, its finish). Where the communicator's thread
// takes turns with compute on the same cores (CPU ranks on every core), each handoff waits
// for a time slice, so small calls can cost where large ones hide. Calibrate probes the
// smallest and the largest size a job overlaps; between measured sizes the fraction is
// interpolated in log(bytes), beyond them it is the nearest one's.
#include <string>
#include <vector>

namespace axonn {

struct OverlapPoint {
  double bytes = 0;     // the probe's all-reduce, nccl-tests size
  double fraction = 0;  // -1 to 1
  bool operator==(const OverlapPoint&) const = default;
};

struct OverlapCurve {
  // Ascending bytes, each size once (the site loader checks it); empty: nothing hidden at any
  // size. One point: its fraction at every size; bytes 0 there when no size was measured.
  std::vector<OverlapPoint> points;

  // One fraction at every size (the site's `overlap = 0.8`); empty for 0.
  static OverlapCurve flat(double fraction);
  // The fraction at a collective of `bytes` (nccl-tests size).
  double at(double bytes) const;
  // Whether some size has a fraction below 0 (overlap costs there).
  bool costs_somewhere() const;
  bool empty() const { return points.empty(); }
  // One fraction for every size, no size measured (what flat() makes of a nonzero fraction).
  bool is_flat() const { return points.size() == 1 && points[0].bytes == 0; }
  bool operator==(const OverlapCurve&) const = default;
};

// "0.33" for a flat curve, "-0.21 at 16 KiB, 0.33 at 192 KiB" for measured sizes, "0" empty.
std::string overlap_curve_text(const OverlapCurve& curve);

}  // namespace axonn
