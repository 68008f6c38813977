#include "runner/ckpt/ckpt_format.hpp"

#include <cstdio>

namespace axonn {

std::string human_bytes(int64_t bytes) {
  const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " B";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f %s", v < 10 ? 2 : (v < 100 ? 1 : 0), v, units[u]);
  return buf;
}

std::string ranks_text(int64_t ranks) { return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks"); }

}  // namespace axonn
