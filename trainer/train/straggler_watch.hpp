#pragma once
// Names a rank that keeps a run waiting. Every run.log_interval steps the ranks share their
// mean step time over the interval (one all-gather of a float per rank over the world);
// rank 0 hands the times to observe(), which returns a warning once the same rank has been
// slower than run.straggler_factor × the median for kPatience intervals in a row, and again
// each further interval it stays so. In a synchronous run every rank's step ends at the same
// collective, so what tells the straggler apart is the time it spent outside the collectives:
// the shared time is the step minus the rank's seconds waiting in blocking collectives.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace axonn {

class StragglerWatch {
 public:
  static constexpr int kPatience = 3;
  // hosts: [world] each rank's host, for the message (empty: ranks only).
  StragglerWatch(double factor, std::vector<std::string> hosts);

  // times: [world] each rank's time for the interval that ended at `step`.
  std::optional<std::string> observe(int64_t step, const std::vector<float>& times);

 private:
  double factor_;
  std::vector<std::string> hosts_;
  int slow_rank_ = -1;  // the rank over the factor in the last interval, -1 for none
  int intervals_ = 0;   // how many intervals in a row it was
};

}  // namespace axonn
