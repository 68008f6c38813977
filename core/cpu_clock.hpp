#pragma once
// CPU time, in seconds, of the calling thread or of the whole process (every thread). Beside a
// span of wall-clock time it tells working from waiting: a span whose CPU time is far below its
// length was blocked (a collective waiting for its peers) or kept off a core (ranks that
// outnumber a host's cores take turns on them).
#include <ctime>

namespace axonn {

inline double cpu_seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

inline double thread_cpu_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

inline double process_cpu_seconds() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }

}  // namespace axonn
