#pragma once
// The communication profile of a run (one rank's): per axis and collective kind, the calls,
// bytes, message sizes in powers of two, time, achieved bus bandwidth, the fraction of the
// started calls' time that overlap hid, and beside it the layout model's time for the same
// calls, so a user sees which link a site config prices wrong. Logged at the end of a run and
// written to summary.json ("comm_profile"); scripts/comm_report.py draws it.
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_grid.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_volume.hpp"

namespace axonn {

struct CommProfileEntry {
  CommAxis axis;
  CollectiveKind kind;
  int group_size = 1;
  LinkTier link = LinkTier::none;
  int64_t calls = 0;
  int64_t bytes = 0;                          // nccl-tests sizes, summed over the run
  double seconds = 0;                         // the calls' own time, on the thread or stream that ran them
  std::array<int64_t, kSizeBuckets> sizes{};  // calls per size_bucket (comm_grid.hpp)
  // nccl-tests' bus bandwidth: bus_factor(kind, n) · bytes / seconds.
  double bus_bytes_per_s = 0;
  // Of the started calls' time (run beside compute), the part the caller did not wait for:
  // 1 − waited / started time, measured per axis (the axis's kinds share it); unset where no
  // call was started or the host never waits for them (NCCL orders them on streams).
  std::optional<double> hidden_fraction;
  double predicted_seconds = 0;  // the layout model's price of the same calls
  // The layout model's hidden fraction of the axis's overlapped calls (CostEstimate's
  // hidden_axis_s / overlapped_axis_s), where it overlaps calls of this kind; unset elsewhere.
  std::optional<double> predicted_hidden_fraction;
};

// The entries with calls, in axis then kind order. `waited`: CommGrid::started_wait_times;
// `predicted`: the layout model's step volume, priced with `machine` at `layout`'s links for
// `steps` steps; `cost`: the model's estimate of that volume (its hidden time per axis).
std::vector<CommProfileEntry> comm_profile(const CommCounters& counted,
                                           const std::array<std::chrono::nanoseconds, kCommAxisCount>& waited,
                                           const StepVolume& predicted, const CostEstimate& cost,
                                           const Machine& machine, const Layout& layout, int64_t steps);

// The profile as log lines, one per entry: "z all_gather (4 ranks, intra-node): 48 calls,
// 12.0 MiB, 0.031 s (predicted 0.028 s, 1.11x), bus 0.39 GB/s, 62% hidden (predicted 40%),
// sizes 64 KiB..256 KiB".
std::vector<std::string> comm_profile_lines(const std::vector<CommProfileEntry>& profile);

// The profile as a JSON array, for summary.json.
std::string comm_profile_json(const std::vector<CommProfileEntry>& profile);

}  // namespace axonn
