#include "trainer/train/startup_times.hpp"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

namespace axonn {
namespace {

double clock_s(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Field 22 of /proc/self/stat: the process's creation time in clock ticks after boot
// (the kernel counts it on CLOCK_BOOTTIME). Field 2, the command name, may hold spaces and
// parentheses, so counting starts after the last ')'. Negative when unreadable.
double process_start_boot_s() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  std::getline(in, stat);  // one line
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)  // fields 3 (state) .. 22 (starttime)
    if (!(fields >> field)) return -1;
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  if (ticks_per_s <= 0) return -1;
  return std::stod(field) / static_cast<double>(ticks_per_s);
}

}  // namespace

StartupTimes StartupTimes::since_process_start() {
  StartupTimes t;
  const double now_boot = clock_s(CLOCK_BOOTTIME);
  const double now_unix = clock_s(CLOCK_REALTIME);
  double start = -1;
  try {
    start = process_start_boot_s();
  } catch (const std::exception&) {
    start = -1;  // a /proc we cannot parse: count from now
  }
  if (start < 0 || start > now_boot) start = now_boot;
  t.process_start_boot_s_ = start;
  t.process_start_unix_s_ = now_unix - (now_boot - start);
  return t;
}

void StartupTimes::mark(const std::string& phase) {
  phases_.emplace_back(phase, clock_s(CLOCK_BOOTTIME) - process_start_boot_s_);
}

std::string StartupTimes::describe() const {
  std::string s;
  for (const auto& [phase, seconds] : phases_) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.3f s", s.empty() ? "" : ", ", phase.c_str(), seconds);
    s += buf;
  }
  return s;
}

}  // namespace axonn
