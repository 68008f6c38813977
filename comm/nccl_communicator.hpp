#pragma once
// Communicator over NCCL on device buffers (GPU path), float32 and bfloat16.
//
// Streams: every communicator owns a CUDA stream (non-blocking, highest priority) and
// queues its collectives there; the calls return at once. The caller orders its compute
// against them with two calls, so a collective on one axis overlaps compute on another
// stream:
//   comm.wait_for(compute);   // collectives queued from now on start after the work
//                             // queued on `compute` so far (the kernels producing the input)
//   comm.all_reduce(dy, n, ElementType::bfloat16);
//   comm.make_wait(compute);  // work queued on `compute` from now on starts after the
//                             // collectives queued so far (the kernels reading the result)
// synchronize() blocks the host until the queued collectives are done.
// The start_* calls (Communicator's overlap calls) do the wait_for but not the make_wait:
// compute goes on beside the collective until finish(ticket) makes the compute stream wait
// for it (an event recorded after it). Without a compute stream (order_with(nullptr))
// finish blocks the host, as synchronize() does. Started collectives of several axes then
// run at once on their streams; the issue-order rule below is what keeps that safe.
// order_with(compute) makes every later collective do both by itself (the trainer's mode:
// each collective then sits between the compute kernels that produce and read its buffers,
// as the Gloo path's blocking calls do, so code written for Gloo is correct unchanged).
//
// Timeouts: the NCCL communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL
// call blocks the host. Each new collective and synchronize() poll the oldest unfinished
// collective (CUDA events around each) and NCCL's asynchronous error. A collective that ran
// longer than the timeout on the GPU (a peer did not arrive), or that the host waited on for
// longer than the timeout without it starting (its stream waits on work that never ends),
// aborts the communicator (ncclCommAbort) and throws CommError naming the group, the
// collective and the group's world ranks. NCCL cannot tell which peer is missing, so the
// message lists them all. Once aborted, every later call throws. The host is watched only
// while it is in this class: wait for collectives with synchronize(), not with a bare
// cudaStreamSynchronize of a stream made to wait on this one (that could hang unwatched).
//
// Records (CollectiveRecord: nccl-tests size, GPU time from the events) are delivered when
// the host sees a collective finish: at a later call or at synchronize().
//
// All-to-all: NCCL has no such collective; it is one grouped call (ncclGroupStart/End) of an
// ncclSend and an ncclRecv per peer with a nonzero count, this rank's own block included
// (NCCL copies it), queued and recorded as one collective. A count of zero is skipped on
// both sides alike (send_counts[j] on rank r is recv_counts[r] on rank j).
//
// A group of one holds no NCCL communicator: all-reduce and broadcast do nothing, all-gather,
// reduce-scatter and all-to-all copy `in` to `out` on the stream (when they differ), nothing is
// recorded (layout_volume.hpp omits such groups), as SingleRankCommunicator does on the host.
//
// Every rank must issue the collectives of its communicators (one per axis, all on one GPU)
// in the same order: an NCCL kernel waiting for a peer can keep another communicator's
// kernel from running, so differing orders can deadlock (NCCL's own rule). The timeout
// then turns that into an error.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/group_spec.hpp"

namespace axonn {

class NcclCommunicator final : public Communicator {
 public:
  using Recorder = std::function<void(const CollectiveRecord&)>;

  // comm: an initialized non-blocking NCCL communicator of `group` (this object owns it from
  // here on), or nullptr for a group of one. Uses the current CUDA device. grid_failed: shared
  // by the communicators of one grid (may be null); an abort sets it, and the others then
  // tear down with ncclCommAbort instead of finalizing (which could wait on a dead peer).
  NcclCommunicator(const GroupSpec& group, int group_rank, ncclComm_t comm, std::chrono::milliseconds timeout,
                   Recorder recorder, std::shared_ptr<std::atomic<bool>> grid_failed);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const override { return members_; }
  const std::string& name() const override { return name_; }

  void all_reduce(void* buf, size_t count, ElementType type) override;
  void all_gather(const void* in, void* out, size_t count, ElementType type) override;
  void reduce_scatter(const void* in, void* out, size_t count, ElementType type) override;
  void broadcast(void* buf, size_t count, int root, ElementType type) override;
  void all_to_all(const void* in, void* out, size_t count, ElementType type) override;
  void all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                   const std::vector<size_t>& recv_counts, ElementType type) override;
  void barrier() override;
  void synchronize() override;
  Ticket start_all_reduce(void* buf, size_t count, ElementType type) override;
  Ticket start_all_gather(const void* in, void* out, size_t count, ElementType type) override;
  Ticket start_reduce_scatter(const void* in, void* out, size_t count, ElementType type) override;
  // The counts are read while the call is queued, so the caller's vectors may go at once.
  Ticket start_all_to_all(const void* in, void* out, size_t count, ElementType type) override;
  Ticket start_all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                           const std::vector<size_t>& recv_counts, ElementType type) override;
  void finish(Ticket ticket) override;

  cudaStream_t stream() const { return stream_; }
  void wait_for(cudaStream_t producer);
  void make_wait(cudaStream_t consumer);
  // From now on every collective (and a group of one's copy) waits for the work queued on
  // `compute` before the call, and work queued on `compute` after the call waits for the
  // collective: wait_for(compute) before, make_wait(compute) after. nullptr: no ordering.
  void order_with(cudaStream_t compute) { compute_ = compute; }
  bool aborted() const { return aborted_; }
  // Queued collectives whose records have not been delivered yet.
  size_t unfinished() const { return pending_.size(); }

 private:
  struct Pending {
    CollectiveKind kind;
    size_t bytes;
    cudaEvent_t start;  // recorded on the stream before the collective
    cudaEvent_t end;    // and after it
    // When the host first saw it start on the GPU, and first blocked waiting on it.
    std::optional<std::chrono::steady_clock::time_point> started_at, waited_since;
  };

  // Whether work queued on the compute stream after a collective waits for it: at once
  // (the blocking calls under order_with), or at finish(ticket) (the started ones).
  enum class ComputeWaits { now, at_finish };
  struct Started {
    Ticket ticket;
    cudaEvent_t done;  // recorded on the stream after the collective
  };

  // Queues one NCCL collective `call` (returning ncclResult_t) between two events.
  template <typename Call>
  void launch(CollectiveKind kind, size_t bytes, Call&& call, ComputeWaits waits = ComputeWaits::now);
  void queue_all_reduce(void* buf, size_t count, ElementType type, ComputeWaits waits);
  void queue_all_gather(const void* in, void* out, size_t count, ElementType type, ComputeWaits waits);
  void queue_reduce_scatter(const void* in, void* out, size_t count, ElementType type, ComputeWaits waits);
  void queue_all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                         const std::vector<size_t>& recv_counts, ElementType type, ComputeWaits waits);
  // The grouped sends and receives of one all-to-all; NCCL's first error, or ncclGroupEnd's
  // result (ncclInProgress while NCCL queues it on its own threads).
  ncclResult_t send_and_receive_blocks(const void* in, const std::vector<size_t>& send_counts, void* out,
                                       const std::vector<size_t>& recv_counts, ElementType type);
  Ticket mark_started();  // an event after the collective just queued, and its ticket
  // Delivers the records of finished collectives, oldest first, and waits until at most
  // `max_left` are unfinished; throws (after aborting) on an error or a timeout.
  void progress(size_t max_left);
  // Polls NCCL's state of this communicator while it is ncclInProgress (an operation NCCL
  // completes on its own threads), up to the timeout; returns the final state.
  ncclResult_t settle(ncclResult_t first);
  void throw_if_aborted(CollectiveKind kind) const;
  // ncclCommAbort, mark this communicator and the grid failed, throw CommError(message).
  [[noreturn]] void abort_with(const std::string& message);
  std::string describe(CollectiveKind kind,
                       size_t bytes) const;            // "all_reduce on group 'x' (world ranks 2,3, 4000 bytes)"
  void copy(const void* in, void* out, size_t bytes, ComputeWaits waits);  // group of one
  cudaEvent_t take_event();
  void give_back(cudaEvent_t event) { free_events_.push_back(event); }
  void release() noexcept;  // frees the CUDA resources (not the NCCL communicator)

  std::string name_;
  std::vector<int> members_;
  int rank_ = 0;
  ncclComm_t comm_ = nullptr;
  bool solo_ = false;  // a group of one: no NCCL communicator
  std::chrono::milliseconds timeout_;
  Recorder recorder_;
  std::shared_ptr<std::atomic<bool>> grid_failed_;
  bool aborted_ = false;
  std::string abort_reason_;

  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;       // order_with: the stream every collective is ordered against
  cudaEvent_t order_event_ = nullptr;    // wait_for / make_wait (no timing)
  cudaEvent_t drained_event_ = nullptr;  // synchronize: the end of everything queued
  float* barrier_word_ = nullptr;        // device float the barrier all-reduces
  std::deque<Pending> pending_;
  std::deque<Started> started_;  // not finished yet, oldest first
  Ticket last_ticket_ = 0;
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace axonn
