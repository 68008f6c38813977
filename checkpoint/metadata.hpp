#pragma once
// Everything besides tensors that a resume needs to continue exactly where the run stopped.
// Stored as root attributes of index.h5 (README.md, "index.h5").
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace axonn {

struct Metadata {
  std::string layout;                          // the layout that wrote it, e.g. "2x2x1x1" (informational)
  std::string model_config;                    // the model section as text; the trainer compares it on load
  int64_t data_cursor = 0;                     // global index of the next training sample
  std::vector<uint8_t> rng_state;              // opaque bytes of the trainer's RNG(s)
  std::map<std::string, int64_t> ints;         // e.g. "lr_schedule.step"
  std::map<std::string, double> reals;         // e.g. "lr_schedule.last_lr"
  std::map<std::string, std::string> strings;  // anything else
  bool operator==(const Metadata&) const = default;
};

}  // namespace axonn
