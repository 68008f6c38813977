#pragma once
// Wall-clock seconds since a point on the monotonic clock: what a step, a call or a phase took;
// and the time of day, for moments compared across processes.
#include <chrono>
#include <ctime>
#include <string>

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

// Now in UTC as strftime's `format` writes it (at most 63 characters): "%Y-%m-%d" for a
// result's date, "%Y-%m-%dT%H:%M:%SZ" for a calibration's.
inline std::string utc_now_text(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[64];
  const size_t length = std::strftime(buf, sizeof buf, format, &utc);
  return std::string(buf, length);
}

}  // namespace axonn
