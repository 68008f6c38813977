#pragma once
// Wall-clock seconds since a point on the monotonic clock: what a step, a call or a phase took;
// and the time of day, for moments compared across processes.
#include <chrono>

namespace axonn {

using WallClock = std::chrono::steady_clock;

inline double seconds_since(WallClock::time_point start) {
  return std::chrono::duration<double>(WallClock::now() - start).count();
}

// The time of day as Unix seconds, microseconds in the fraction: a moment other processes
// compare with theirs (TensorBoard's wall_time, when a launcher saw a failure).
inline double unix_seconds_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count()) / 1e6;
}

}  // namespace axonn
