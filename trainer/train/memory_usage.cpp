#include "trainer/train/memory_usage.hpp"

#include <fstream>
#include <string>

namespace axonn {

MemorySample memory_sample() {
  MemorySample s;
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (status >> key) {
    if (key == "VmRSS:" && status >> kib) s.rss_bytes = kib * 1024;
    if (key == "VmHWM:" && status >> kib) s.peak_bytes = kib * 1024;
  }
  return s;
}

bool reset_peak_memory() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace axonn
