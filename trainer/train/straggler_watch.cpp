#include "trainer/train/straggler_watch.hpp"

#include <algorithm>
#include <cstdio>

namespace axonn {

StragglerWatch::StragglerWatch(double factor, std::vector<std::string> hosts)
    : factor_(factor), hosts_(std::move(hosts)) {}

std::optional<std::string> StragglerWatch::observe(int64_t step, const std::vector<float>& times) {
  if (times.size() < 2) return std::nullopt;
  std::vector<float> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  // The lower median: with two ranks, the faster one is the reference.
  const double median = sorted[(sorted.size() - 1) / 2];
  const auto slowest = static_cast<int>(std::max_element(times.begin(), times.end()) - times.begin());
  const double slowest_s = times[static_cast<size_t>(slowest)];
  if (!(median > 0) || slowest_s <= factor_ * median) {
    slow_rank_ = -1;
    intervals_ = 0;
    return std::nullopt;
  }
  intervals_ = slowest == slow_rank_ ? intervals_ + 1 : 1;
  slow_rank_ = slowest;
  if (intervals_ < kPatience) return std::nullopt;
  const std::string host =
      static_cast<size_t>(slowest) < hosts_.size() ? " on " + hosts_[static_cast<size_t>(slowest)] : "";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "straggler: rank %d%s is %.2fx the median rank (%.4f s against %.4f s outside blocking "
                "collectives per step) for %d intervals up to step %lld (run.straggler_factor %.2f); the other "
                "ranks wait for it at every collective",
                slowest, host.c_str(), slowest_s / median, slowest_s, median, intervals_, static_cast<long long>(step),
                factor_);
  return std::string(buf);
}

}  // namespace axonn
