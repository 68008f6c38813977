#pragma once
// The communicators of one rank in a 4D layout: its x, y, z and data groups and the whole
// job, connected in one bootstrap, with every collective counted per (axis, kind) so the
// trainer's traffic can be checked against the layout model (layout_volume.hpp), and
// optionally logged with its size and duration (a communication log). On Gloo a failed
// collective names the rank(s) that did not arrive, their host and pid (rank_watch.hpp).
//
// Backends: Gloo on host buffers (CPU path) or NCCL on device buffers (GPU path; the
// caller picks the device first, select_cuda_device in cuda_device.hpp). With NCCL the
// collectives are stream-ordered and counted when the host sees them finish: call
// synchronize() before reading the counters.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.hpp"
#include "comm/exchange.hpp"
#include "layout/layout.hpp"

namespace axonn {

class TraceRecorder;

class NcclCommunicator;
class RankWatch;

enum class CommBackend { gloo, nccl };
const char* comm_backend_name(CommBackend backend);       // "gloo", "nccl"
CommBackend parse_comm_backend(const std::string& text);  // throws CommError naming the choices

// Message sizes in powers of two: bucket 0 holds empty messages (barriers), bucket i > 0 the
// sizes in [2^(i-1), 2^i).
constexpr int kSizeBuckets = 48;
int size_bucket(size_t bytes);
int64_t size_bucket_floor(int bucket);  // the smallest size of the bucket: 0, 1, 2, 4, ...

struct CollectiveCount {
  int64_t calls = 0;
  int64_t bytes = 0;  // nccl-tests size, summed
  std::chrono::nanoseconds time{0};
  std::chrono::nanoseconds started_time{0};   // of `time`: the started calls' (beside compute)
  std::array<int64_t, kSizeBuckets> sizes{};  // calls per size_bucket
};

// [axis][kind] counters, CommAxis and CollectiveKind as indices.
using CommCounters = std::array<std::array<CollectiveCount, kCollectiveKindCount>, kCommAxisCount>;

class CommGrid {
 public:
  // Collective over the job: every rank builds the same layout. Axes of size one get a
  // communicator too (its collectives are local copies and count nothing), so callers
  // never special-case them. single_host: every rank runs on this machine, so Gloo uses
  // loopback (see make_gloo_device for the overrides; NCCL finds its own interfaces).
  // backend nccl in a build without CUDA throws CommError saying so. `key` names the
  // bootstrap's exchanges: a job that connects a second grid gives it another.
  CommGrid(Exchange& exchange, const Layout& layout, std::chrono::milliseconds timeout, bool single_host,
           CommBackend backend = CommBackend::gloo, const std::string& key = "grid");
  ~CommGrid();
  CommGrid(const CommGrid&) = delete;
  CommGrid& operator=(const CommGrid&) = delete;

  Communicator& axis(CommAxis a) { return *comms_[static_cast<size_t>(a)]; }
  Communicator& world() { return axis(CommAxis::world); }
  // The NCCL communicator of an axis, for its stream and wait_for/make_wait; throws
  // CommError on the gloo backend.
  NcclCommunicator& nccl(CommAxis a);
  CommBackend backend() const { return backend_; }
  const Layout& layout() const { return layout_; }
  const Coords& coords() const { return coords_; }

  // NCCL: orders every later collective of every axis against `compute_stream` (the
  // trainer backend's compute stream, a cudaStream_t as void* so this header needs no CUDA
  // header): a collective starts after the work queued there before the call, and work
  // queued there after the call starts after the collective (NcclCommunicator::order_with).
  // Code that issues collectives between its kernels is then correct as written for Gloo;
  // the host reads a result after synchronize(), with a copy on the compute stream.
  // nullptr: no ordering. Gloo: nothing to order (its calls block), so only nullptr is
  // accepted; a stream throws CommError.
  void order_with_compute(void* compute_stream);

  // Waits for every axis' queued collectives (NCCL); nothing to do on Gloo.
  void synchronize();
  // Read them when no started collective is running (after its finish).
  const CommCounters& counters() const { return counters_; }
  // Per axis: the time callers waited for started collectives since the last reset
  // (Communicator::started_wait_time).
  std::array<std::chrono::nanoseconds, kCommAxisCount> started_wait_times() const;
  void reset_counters();
  // The counters and wait times as they stand, and putting them back: collectives that are
  // not a training step's (a held-out evaluation between steps) stay out of what the run
  // compares with the layout model. Synchronize before taking and before restoring.
  struct CounterState {
    CommCounters counters{};
    std::array<std::chrono::nanoseconds, kCommAxisCount> waited{};
  };
  CounterState counter_state() const { return {counters_, started_wait_times()}; }
  void restore_counters(const CounterState& state);

  // Every later collective also becomes an event of `trace` (category "comm": axis, kind,
  // bytes, the group's world ranks), on the thread that ran it (a started Gloo collective's
  // track is "collectives <axis>") or, on NCCL, on a track per axis's stream, placed where the
  // host saw it end. nullptr: none. The recorder must outlive the grid's collectives.
  void trace_into(TraceRecorder* trace);

 private:
  std::function<void(const CollectiveRecord&)> recorder(CommAxis axis);
  void trace_collective(TraceRecorder& trace, CommAxis axis, const CollectiveRecord& r,
                        std::chrono::steady_clock::time_point end) const;

  Layout layout_;
  Coords coords_;
  CommBackend backend_;
  std::array<std::unique_ptr<Communicator>, kCommAxisCount> comms_;
  std::array<NcclCommunicator*, kCommAxisCount> nccl_{};  // the same objects, NCCL backend only
  std::mutex record_mutex_;                               // recorder(): communicator threads report too
  CommCounters counters_{};
  std::array<std::chrono::nanoseconds, kCommAxisCount> wait_baseline_{};
  TraceRecorder* trace_ = nullptr;
  std::array<std::string, kCommAxisCount> group_json_;  // each axis's members, "[0, 2]" (trace_into)
  std::unique_ptr<RankWatch> watch_;                    // Gloo only; destroyed after the communicators (~CommGrid)
};

}  // namespace axonn
