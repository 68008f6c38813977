#pragma once
// A collective kind's times as `axonn calibrate` measured them, size by size, on groups of
// one size: what the model prices a call by where it was measured, so that a step in the cost
// (a communicator changing protocol at some size, a loopback socket's buffer filling) is
// priced as measured rather than smoothed over by the fitted lines (on one 2-core VM, Gloo's
// all-reduce of 2 ranks took 66 us at 64 KiB and 421 us at 128 KiB, where the line fitted
// through 4 KiB-1 MiB gave 101 and 186 us).
#include <optional>
#include <vector>

namespace axonn {

struct SweepPoint {
  double bytes = 0;    // nccl-tests size
  double seconds = 0;  // one call, waiting for the group's slowest rank included
  bool operator==(const SweepPoint&) const = default;
};

struct MeasuredSweep {
  int ranks = 0;                   // the group size the sweep ran on
  std::vector<SweepPoint> points;  // ascending bytes, each size once (the site loader checks it)

  // One call of `bytes` on groups of `group_size`: between the smallest and the largest
  // measured size, the time interpolated between the two measured sizes around it (linear in
  // log time against log size: a power law between neighbours, exact at each); nullopt for
  // another group size or a size outside the measured ones, which the fitted lines price.
  std::optional<double> seconds_at(double bytes, int group_size) const;
  bool operator==(const MeasuredSweep&) const = default;
};

}  // namespace axonn
