#include "trainer/train/comm_profile.hpp"

#include <algorithm>
#include <cstdio>

#include "core/json_text.hpp"
#include "layout/collective.hpp"

namespace axonn {
namespace {

// "64 KiB": a bucket's smallest size, in the unit that keeps it whole.
std::string size_text(int64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && bytes % 1024 == 0 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + units[unit];
}

}  // namespace

std::vector<CommProfileEntry> comm_profile(const CommCounters& counted,
                                           const std::array<std::chrono::nanoseconds, kCommAxisCount>& waited,
                                           const StepVolume& predicted, const CostEstimate& cost,
                                           const Machine& machine, const Layout& layout, int64_t steps) {
  std::vector<CommProfileEntry> profile;
  for (int a = 0; a < kCommAxisCount; ++a) {
    const auto axis = static_cast<CommAxis>(a);
    const auto ai = static_cast<size_t>(a);
    // The axis's started time, over its kinds: what `waited` is a part of.
    double started_s = 0;
    for (const CollectiveCount& c : counted[ai]) started_s += std::chrono::duration<double>(c.started_time).count();
    const double waited_s = std::chrono::duration<double>(waited[ai]).count();
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const CollectiveCount& c = counted[ai][static_cast<size_t>(k)];
      if (c.calls == 0) continue;
      CommProfileEntry e;
      e.axis = axis;
      e.kind = static_cast<CollectiveKind>(k);
      e.group_size = predicted.group_size[ai];
      e.link = axis_link(machine, layout, axis);
      e.calls = c.calls;
      e.bytes = c.bytes;
      e.seconds = std::chrono::duration<double>(c.time).count();
      e.sizes = c.sizes;
      if (e.seconds > 0)
        e.bus_bytes_per_s = bus_factor(e.kind, e.group_size) * static_cast<double>(e.bytes) / e.seconds;
      if (c.started_time.count() > 0 && started_s > 0)
        e.hidden_fraction = std::clamp(1.0 - waited_s / started_s, 0.0, 1.0);
      bool overlapped = false;
      for (const CollectiveCalls& calls : predicted.calls) {
        if (calls.axis != axis || calls.kind != e.kind) continue;
        e.predicted_seconds +=
            static_cast<double>(steps) * collective_calls_seconds(machine, e.link, calls, e.group_size);
        overlapped = overlapped || calls.overlapped;
      }
      if (overlapped && cost.overlapped_axis_s[ai] > 0)
        e.predicted_hidden_fraction = cost.hidden_axis_s[ai] / cost.overlapped_axis_s[ai];
      profile.push_back(e);
    }
  }
  return profile;
}

std::vector<std::string> comm_profile_lines(const std::vector<CommProfileEntry>& profile) {
  std::vector<std::string> lines;
  for (const CommProfileEntry& e : profile) {
    int smallest = -1, largest = -1;
    for (int b = 0; b < kSizeBuckets; ++b) {
      if (e.sizes[static_cast<size_t>(b)] == 0) continue;
      if (smallest < 0) smallest = b;
      largest = b;
    }
    char buf[320];
    std::snprintf(buf, sizeof buf, "%s %s (%d ranks, %s): %lld calls, %.3f MiB, %.4f s (predicted %.4f s",
                  comm_axis_name(e.axis).c_str(), collective_name(e.kind), e.group_size, link_tier_name(e.link),
                  static_cast<long long>(e.calls), static_cast<double>(e.bytes) / 1048576.0, e.seconds,
                  e.predicted_seconds);
    std::string line = buf;
    if (e.predicted_seconds > 0) {
      std::snprintf(buf, sizeof buf, ", measured %.2fx", e.seconds / e.predicted_seconds);
      line += buf;
    }
    line += ")";
    if (e.bus_bytes_per_s > 0) {
      std::snprintf(buf, sizeof buf, ", bus %.3g GB/s", e.bus_bytes_per_s / 1e9);
      line += buf;
    }
    if (e.hidden_fraction) {
      std::snprintf(buf, sizeof buf, ", %.0f%% hidden", 100.0 * *e.hidden_fraction);
      line += buf;
    }
    if (e.predicted_hidden_fraction) {
      std::snprintf(buf, sizeof buf, " (predicted %.0f%%)", 100.0 * *e.predicted_hidden_fraction);
      line += buf;
    }
    if (smallest >= 0)
      line += ", sizes " + size_text(size_bucket_floor(smallest)) +
              (largest > smallest ? ".." + size_text(size_bucket_floor(largest)) : std::string());
    lines.push_back(line);
  }
  return lines;
}

std::string comm_profile_json(const std::vector<CommProfileEntry>& profile) {
  std::string j = "[";
  for (size_t i = 0; i < profile.size(); ++i) {
    const CommProfileEntry& e = profile[i];
    j += std::string(i ? "," : "") + "\n    {\"axis\": " + json_string(comm_axis_name(e.axis)) +
         ", \"kind\": " + json_string(collective_name(e.kind)) + ", \"group_size\": " + std::to_string(e.group_size) +
         ", \"link\": " + json_string(link_tier_name(e.link)) + ", \"calls\": " + std::to_string(e.calls) +
         ", \"bytes\": " + std::to_string(e.bytes) + ", \"seconds\": " + json_number(e.seconds) +
         ", \"bus_GBps\": " + json_number(e.bus_bytes_per_s / 1e9) +
         ", \"hidden_fraction\": " + (e.hidden_fraction ? json_number(*e.hidden_fraction) : std::string("null")) +
         ", \"predicted_hidden_fraction\": " +
         (e.predicted_hidden_fraction ? json_number(*e.predicted_hidden_fraction) : std::string("null")) +
         ", \"predicted_seconds\": " + json_number(e.predicted_seconds) + ", \"size_histogram\": {";
    bool first = true;
    for (int b = 0; b < kSizeBuckets; ++b) {
      const int64_t n = e.sizes[static_cast<size_t>(b)];
      if (n == 0) continue;
      j +=
          std::string(first ? "" : ", ") + json_string(std::to_string(size_bucket_floor(b))) + ": " + std::to_string(n);
      first = false;
    }
    j += "}}";
  }
  return j + (profile.empty() ? "]" : "\n  ]");
}

}  // namespace axonn
