#pragma once
// Wall-clock seconds since a point on the monotonic clock: what a step, a call or a phase took.
#include <chrono>

namespace axonn {

using WallClock = std::chrono::steady_clock;

inline double seconds_since(WallClock::time_point start) {
  return std::chrono::duration<double>(WallClock::now() - start).count();
}

}  // namespace axonn
