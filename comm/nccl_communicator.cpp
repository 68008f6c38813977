#include "comm/nccl_communicator.hpp"

#include <thread>

#include "comm/cuda_check.hpp"

namespace axonn {
namespace {

using clock_type = std::chrono::steady_clock;

// Bounds the queue of unfinished collectives (two events each), so a loop that never
// synchronizes still gets its timeouts checked and its records delivered.
constexpr size_t kMaxUnfinished = 256;

ncclDataType_t nccl_type(ElementType type) { return type == ElementType::float32 ? ncclFloat32 : ncclBfloat16; }

// Polling pace: spin briefly (collectives of small messages finish in microseconds), then
// sleep with growing pauses up to 1 ms so a long wait does not burn a core.
class Backoff {
 public:
  void pause() {
    if (++polls_ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds pause_{10};
};

}  // namespace

NcclCommunicator::NcclCommunicator(const GroupSpec& group, int group_rank, ncclComm_t comm,
                                   std::chrono::milliseconds timeout, Recorder recorder,
                                   std::shared_ptr<std::atomic<bool>> grid_failed)
    : name_(group.name),
      members_(group.members),
      rank_(group_rank),
      comm_(comm),
      solo_(comm == nullptr),
      timeout_(timeout),
      recorder_(std::move(recorder)),
      grid_failed_(std::move(grid_failed)) {
  if (solo_ && members_.size() != 1)
    throw CommError("NcclCommunicator for group '" + name_ + "' (world ranks " + format_ranks(members_) +
                    ") needs an NCCL communicator: only a group of one runs without");
  try {
    // Highest priority: a collective that becomes ready is scheduled ahead of queued compute
    // kernels, so the peers waiting on it are not held up by this rank's compute.
    int least = 0, greatest = 0;
    AXONN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    AXONN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    AXONN_CUDA_CHECK(cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming));
    AXONN_CUDA_CHECK(cudaEventCreateWithFlags(&drained_event_, cudaEventDisableTiming));
    if (!solo_) AXONN_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(float)));
  } catch (...) {
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    release();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    // A clean teardown finishes the queued collectives and finalizes (NCCL flushes its own
    // work); any failure here, or in another communicator of the grid, aborts instead.
    bool clean = !(grid_failed_ && *grid_failed_);
    if (clean) {
      try {
        synchronize();
      } catch (const CommError&) {
        clean = false;  // synchronize aborted the communicator
      }
    }
    if (comm_ && clean) clean = settle(ncclCommFinalize(comm_)) == ncclSuccess;
    if (comm_) (void)(clean ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
    comm_ = nullptr;
  }
  release();
}

void NcclCommunicator::release() noexcept {
  // Destroying an event or stream with work still queued is allowed: CUDA frees them when
  // that work completes.
  for (const Pending& p : pending_) {
    (void)cudaEventDestroy(p.start);
    (void)cudaEventDestroy(p.end);
  }
  pending_.clear();
  for (const Started& st : started_) (void)cudaEventDestroy(st.done);
  started_.clear();
  for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
  free_events_.clear();
  if (order_event_) (void)cudaEventDestroy(order_event_);
  if (drained_event_) (void)cudaEventDestroy(drained_event_);
  if (barrier_word_) (void)cudaFree(barrier_word_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  order_event_ = nullptr;
  drained_event_ = nullptr;
  barrier_word_ = nullptr;
  stream_ = nullptr;
}

std::string NcclCommunicator::describe(CollectiveKind kind, size_t bytes) const {
  return std::string(collective_name(kind)) + " on group '" + name_ + "' (world ranks " + format_ranks(members_) +
         ", " + std::to_string(bytes) + " bytes)";
}

void NcclCommunicator::throw_if_aborted(CollectiveKind kind) const {
  if (aborted_)
    throw CommError(std::string(collective_name(kind)) + " on group '" + name_ +
                    "': the communicator was aborted earlier (" + abort_reason_ + ")");
}

void NcclCommunicator::abort_with(const std::string& message) {
  std::string reason = message;
  if (comm_) {
    // Blocking even on a non-blocking communicator; the kernels still running see NCCL's
    // abort flag and return.
    if (const ncclResult_t r = ncclCommAbort(comm_); r != ncclSuccess)
      reason += " (ncclCommAbort: " + cuda_error_text(r) + ")";
    comm_ = nullptr;
  }
  aborted_ = true;
  abort_reason_ = reason;
  if (grid_failed_) *grid_failed_ = true;
  for (const Pending& p : pending_) {
    give_back(p.start);
    give_back(p.end);
  }
  pending_.clear();
  for (const Started& st : started_) give_back(st.done);
  started_.clear();
  throw CommError(reason + "; the communicator was aborted on " + cuda_check_where());
}

ncclResult_t NcclCommunicator::settle(ncclResult_t first) {
  if (first != ncclInProgress) return first;
  const auto deadline = clock_type::now() + timeout_;
  Backoff backoff;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    if (const ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess) return r;
    if (state == ncclInProgress) {
      if (clock_type::now() > deadline) return ncclInProgress;
      backoff.pause();
    }
  }
  return state;
}

cudaEvent_t NcclCommunicator::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  AXONN_CUDA_CHECK(cudaEventCreate(&e));  // with timing: the records' durations
  return e;
}

template <typename Call>
void NcclCommunicator::launch(CollectiveKind kind, size_t bytes, Call&& call, ComputeWaits waits) {
  throw_if_aborted(kind);
  progress(kMaxUnfinished - 1);
  const Pending p{kind, bytes, take_event(), take_event(), std::nullopt, std::nullopt};
  try {
    if (compute_) wait_for(compute_);
    AXONN_CUDA_CHECK(cudaEventRecord(p.start, stream_));
    // ncclInProgress: NCCL finishes queueing on its own threads (e.g. connecting on first
    // use); the kernel is on the stream once the state settles to ncclSuccess.
    const ncclResult_t r = settle(call());
    if (r == ncclInProgress)
      abort_with(describe(kind, bytes) + " was not queued within " + std::to_string(timeout_.count()) +
                 " ms: NCCL kept connecting to the group's peers (one of world ranks " + format_ranks(members_) +
                 " is not there)");
    if (r != ncclSuccess) abort_with(describe(kind, bytes) + " failed: " + cuda_error_text(r));
    AXONN_CUDA_CHECK(cudaEventRecord(p.end, stream_));
    if (compute_ && waits == ComputeWaits::now) make_wait(compute_);
  } catch (...) {
    give_back(p.start);
    give_back(p.end);
    throw;
  }
  pending_.push_back(p);
}

void NcclCommunicator::progress(size_t max_left) {
  Backoff backoff;
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    const cudaError_t done = cudaEventQuery(p.end);
    if (done == cudaSuccess) {
      float ms = 0;
      AXONN_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.end));
      const CollectiveRecord record{p.kind, p.bytes,
                                    std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(ms) * 1e6))};
      give_back(p.start);
      give_back(p.end);
      pending_.pop_front();
      if (recorder_) recorder_(record);
      continue;
    }
    if (done != cudaErrorNotReady) AXONN_CUDA_CHECK(done);

    if (comm_) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
        abort_with(describe(p.kind, p.bytes) + " failed on the GPU: " + cuda_error_text(r != ncclSuccess ? r : state));
    }
    const auto now = clock_type::now();
    if (!p.started_at) {
      const cudaError_t started = cudaEventQuery(p.start);
      if (started == cudaSuccess)
        p.started_at = now;
      else if (started != cudaErrorNotReady)
        AXONN_CUDA_CHECK(started);
    }
    const bool must_wait = pending_.size() > max_left;
    if (must_wait && !p.waited_since) p.waited_since = now;
    const std::string limit = std::to_string(timeout_.count()) + " ms";
    if (p.started_at && now - *p.started_at > timeout_)
      abort_with(describe(p.kind, p.bytes) + " did not finish within " + limit +
                 " of starting on the GPU: not every rank of the group arrived (NCCL cannot tell which of world "
                 "ranks " +
                 format_ranks(members_) + " is missing)");
    if (!p.started_at && p.waited_since && now - *p.waited_since > timeout_)
      abort_with(describe(p.kind, p.bytes) + " did not start within " + limit +
                 ": this communicator's stream waits on earlier work that did not finish (a collective on another "
                 "axis, or compute it was ordered after with wait_for)");
    if (!must_wait) return;
    backoff.pause();
  }
}

void NcclCommunicator::synchronize() {
  if (aborted_)
    throw CommError("synchronize on group '" + name_ + "': the communicator was aborted earlier (" + abort_reason_ +
                    ")");
  progress(0);
  // The collectives are done; the stream may still hold a group of one's copies, or a
  // wait_for on compute with nothing after it. Wait for those too, with the same limit.
  AXONN_CUDA_CHECK(cudaEventRecord(drained_event_, stream_));
  const auto deadline = clock_type::now() + timeout_;
  Backoff backoff;
  for (;;) {
    const cudaError_t e = cudaEventQuery(drained_event_);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) AXONN_CUDA_CHECK(e);
    if (clock_type::now() > deadline)
      throw CommError("synchronize on group '" + name_ + "' (world ranks " + format_ranks(members_) +
                      "): its stream did not drain within " + std::to_string(timeout_.count()) +
                      " ms: it waits on work it was ordered after with wait_for that did not finish (" +
                      cuda_check_where() + ")");
    backoff.pause();
  }
}

void NcclCommunicator::wait_for(cudaStream_t producer) {
  AXONN_CUDA_CHECK(cudaEventRecord(order_event_, producer));
  AXONN_CUDA_CHECK(cudaStreamWaitEvent(stream_, order_event_, 0));
}

void NcclCommunicator::make_wait(cudaStream_t consumer) {
  AXONN_CUDA_CHECK(cudaEventRecord(order_event_, stream_));
  AXONN_CUDA_CHECK(cudaStreamWaitEvent(consumer, order_event_, 0));
}

void NcclCommunicator::copy(const void* in, void* out, size_t bytes, ComputeWaits waits) {
  if (in == out || bytes == 0) return;
  if (compute_) wait_for(compute_);
  AXONN_CUDA_CHECK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream_));
  if (compute_ && waits == ComputeWaits::now) make_wait(compute_);
}

void NcclCommunicator::queue_all_reduce(void* buf, size_t count, ElementType type, ComputeWaits waits) {
  throw_if_aborted(CollectiveKind::all_reduce);
  if (solo_) return;
  launch(
      CollectiveKind::all_reduce, count * element_size(type),
      [&] { return ncclAllReduce(buf, buf, count, nccl_type(type), ncclSum, comm_, stream_); }, waits);
}

void NcclCommunicator::queue_all_gather(const void* in, void* out, size_t count, ElementType type,
                                        ComputeWaits waits) {
  throw_if_aborted(CollectiveKind::all_gather);
  const size_t block = count * element_size(type);
  if (solo_) return copy(in, out, block, waits);
  launch(
      CollectiveKind::all_gather, block * members_.size(),
      [&] { return ncclAllGather(in, out, count, nccl_type(type), comm_, stream_); }, waits);
}

void NcclCommunicator::all_reduce(void* buf, size_t count, ElementType type) {
  queue_all_reduce(buf, count, type, ComputeWaits::now);
}

void NcclCommunicator::all_gather(const void* in, void* out, size_t count, ElementType type) {
  queue_all_gather(in, out, count, type, ComputeWaits::now);
}

Communicator::Ticket NcclCommunicator::start_all_reduce(void* buf, size_t count, ElementType type) {
  queue_all_reduce(buf, count, type, ComputeWaits::at_finish);
  return mark_started();
}

Communicator::Ticket NcclCommunicator::start_all_gather(const void* in, void* out, size_t count, ElementType type) {
  queue_all_gather(in, out, count, type, ComputeWaits::at_finish);
  return mark_started();
}

Communicator::Ticket NcclCommunicator::mark_started() {
  const cudaEvent_t done = take_event();
  try {
    AXONN_CUDA_CHECK(cudaEventRecord(done, stream_));
  } catch (...) {
    give_back(done);
    throw;
  }
  started_.push_back({++last_ticket_, done});
  return last_ticket_;
}

// The stream runs its collectives in order, so waiting for the newest started one at or
// before `ticket` covers the older ones too.
void NcclCommunicator::finish(Ticket ticket) {
  if (aborted_)
    throw CommError("finish on group '" + name_ + "': the communicator was aborted earlier (" + abort_reason_ + ")");
  cudaEvent_t newest = nullptr;
  size_t done = 0;
  while (done < started_.size() && started_[done].ticket <= ticket) newest = started_[done++].done;
  if (newest == nullptr) return;
  if (compute_)
    AXONN_CUDA_CHECK(cudaStreamWaitEvent(compute_, newest, 0));
  else
    synchronize();
  for (; done > 0; --done) {
    give_back(started_.front().done);
    started_.pop_front();
  }
}

void NcclCommunicator::queue_reduce_scatter(const void* in, void* out, size_t count, ElementType type,
                                            ComputeWaits waits) {
  throw_if_aborted(CollectiveKind::reduce_scatter);
  const size_t block = count * element_size(type);
  if (solo_) return copy(in, out, block, waits);
  launch(
      CollectiveKind::reduce_scatter, block * members_.size(),
      [&] { return ncclReduceScatter(in, out, count, nccl_type(type), ncclSum, comm_, stream_); }, waits);
}

void NcclCommunicator::reduce_scatter(const void* in, void* out, size_t count, ElementType type) {
  queue_reduce_scatter(in, out, count, type, ComputeWaits::now);
}

Communicator::Ticket NcclCommunicator::start_reduce_scatter(const void* in, void* out, size_t count,
                                                            ElementType type) {
  queue_reduce_scatter(in, out, count, type, ComputeWaits::at_finish);
  return mark_started();
}

void NcclCommunicator::broadcast(void* buf, size_t count, int root, ElementType type) {
  throw_if_aborted(CollectiveKind::broadcast);
  if (root < 0 || root >= size())
    throw CommError("broadcast on group '" + name_ + "': root " + std::to_string(root) + " is not in [0, " +
                    std::to_string(size()) + ")");
  if (solo_) return;
  launch(CollectiveKind::broadcast, count * element_size(type),
         [&] { return ncclBroadcast(buf, buf, count, nccl_type(type), root, comm_, stream_); });
}

// Every count the same: the blocks are `count` elements each way.
void NcclCommunicator::all_to_all(const void* in, void* out, size_t count, ElementType type) {
  const std::vector<size_t> counts(members_.size(), count);
  queue_all_to_allv(in, counts, out, counts, type, ComputeWaits::now);
}

void NcclCommunicator::all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                                   const std::vector<size_t>& recv_counts, ElementType type) {
  queue_all_to_allv(in, send_counts, out, recv_counts, type, ComputeWaits::now);
}

Communicator::Ticket NcclCommunicator::start_all_to_all(const void* in, void* out, size_t count, ElementType type) {
  const std::vector<size_t> counts(members_.size(), count);
  queue_all_to_allv(in, counts, out, counts, type, ComputeWaits::at_finish);
  return mark_started();
}

Communicator::Ticket NcclCommunicator::start_all_to_allv(const void* in, const std::vector<size_t>& send_counts,
                                                         void* out, const std::vector<size_t>& recv_counts,
                                                         ElementType type) {
  queue_all_to_allv(in, send_counts, out, recv_counts, type, ComputeWaits::at_finish);
  return mark_started();
}

void NcclCommunicator::queue_all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                                         const std::vector<size_t>& recv_counts, ElementType type, ComputeWaits waits) {
  throw_if_aborted(CollectiveKind::all_to_all);
  const size_t bytes = all_to_allv_bytes(send_counts, recv_counts, type);
  if (solo_) return copy(in, out, bytes, waits);
  launch(
      CollectiveKind::all_to_all, bytes,
      [&] { return send_and_receive_blocks(in, send_counts, out, recv_counts, type); }, waits);
}

// Block j of each buffer starts after the blocks before it (counts in elements, offsets in
// bytes). A failed ncclSend or ncclRecv still ends the group, as NCCL requires.
ncclResult_t NcclCommunicator::send_and_receive_blocks(const void* in, const std::vector<size_t>& send_counts,
                                                       void* out, const std::vector<size_t>& recv_counts,
                                                       ElementType type) {
  const size_t element = element_size(type);
  if (const ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
  ncclResult_t first = ncclSuccess;
  size_t send_offset = 0, recv_offset = 0;
  for (size_t peer = 0; peer < members_.size() && first == ncclSuccess; ++peer) {
    const int p = static_cast<int>(peer);
    if (send_counts[peer] > 0)
      first =
          ncclSend(static_cast<const char*>(in) + send_offset, send_counts[peer], nccl_type(type), p, comm_, stream_);
    if (first == ncclSuccess && recv_counts[peer] > 0)
      first = ncclRecv(static_cast<char*>(out) + recv_offset, recv_counts[peer], nccl_type(type), p, comm_, stream_);
    send_offset += send_counts[peer] * element;
    recv_offset += recv_counts[peer] * element;
  }
  const ncclResult_t ended = ncclGroupEnd();
  return first != ncclSuccess ? first : ended;
}

// NCCL has no barrier: an all-reduce of one float that every rank must join, then a host
// wait for it. Recorded as a barrier of 0 bytes, as on Gloo.
void NcclCommunicator::barrier() {
  throw_if_aborted(CollectiveKind::barrier);
  if (!solo_)
    launch(CollectiveKind::barrier, 0,
           [&] { return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  synchronize();
}

}  // namespace axonn
