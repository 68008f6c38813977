#pragma once
// This process's resident memory, for the report that compares it with the layout model's
// prediction. Linux: VmRSS and VmHWM from /proc/self/status; the peak (VmHWM) can be reset
// by writing "5" to /proc/self/clear_refs, so a peak can be measured from a baseline.
#include <cstdint>

namespace axonn {

struct MemorySample {
  int64_t rss_bytes = 0;   // resident now
  int64_t peak_bytes = 0;  // highest resident since start or since reset_peak_memory()
};

// Zeros when /proc is not readable.
MemorySample memory_sample();
// Restarts the peak at the current RSS; false when the kernel does not allow it.
bool reset_peak_memory();

}  // namespace axonn
