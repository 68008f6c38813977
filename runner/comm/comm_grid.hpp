#pragma once
// The communicators of one rank in a 4D layout: its x, y, z and data groups and the whole
// job, connected in one bootstrap, with every collective counted per (axis, kind) so the
// trainer's traffic can be checked against the layout model (layout_volume.hpp), and
// optionally logged with its size and duration (a communication log).
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.hpp"
#include "comm/exchange.hpp"
#include "layout/layout.hpp"

namespace axonn {

struct CollectiveCount {
  int64_t calls = 0;
  int64_t bytes = 0;  // nccl-tests size, summed
  std::chrono::nanoseconds time{0};
};

// [axis][kind] counters, CommAxis and CollectiveKind as indices.
using CommCounters = std::array<std::array<CollectiveCount, kCollectiveKindCount>, kCommAxisCount>;

class CommGrid {
 public:
  using Logger = std::function<void(CommAxis, const CollectiveRecord&)>;

  // Collective over the job: every rank builds the same layout. Axes of size one get a
  // communicator too (its collectives are local copies and count nothing), so callers
  // never special-case them. single_host: every rank runs on this machine, so Gloo uses
  // loopback (see make_gloo_device for the overrides).
  CommGrid(Exchange& exchange, const Layout& layout, std::chrono::milliseconds timeout, bool single_host);
  ~CommGrid();

  Communicator& axis(CommAxis a) { return *comms_[static_cast<size_t>(a)]; }
  Communicator& world() { return axis(CommAxis::world); }
  const Layout& layout() const { return layout_; }
  const Coords& coords() const { return coords_; }

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }
  void set_logger(Logger logger) { logger_ = std::move(logger); }

 private:
  Layout layout_;
  Coords coords_;
  std::array<std::unique_ptr<Communicator>, kCommAxisCount> comms_;
  CommCounters counters_{};
  Logger logger_;
};

}  // namespace axonn
