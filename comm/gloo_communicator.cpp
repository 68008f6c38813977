#include "comm/gloo_communicator.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/host_sum.hpp"

namespace axonn {
namespace {

// Slots for the hand-written ring reduce-scatter: a prefix no Gloo collective uses,
// then the call's tag and the ring step.
constexpr uint64_t kReduceScatterSlotPrefix = 0xA7ull << 56;

}  // namespace

size_t gloo_small_message_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("AXONN_GLOO_SMALL_BYTES");
    if (!env || !*env) return size_t{64} << 10;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (*end != '\0' || v > (size_t{256} << 20))
      throw CommError(std::string("AXONN_GLOO_SMALL_BYTES=") + env +
                      ": expected a byte count from 0 (latency path off) to 268435456");
    return static_cast<size_t>(v);
  }();
  return bytes;
}

GlooCommunicator::GlooCommunicator(const GroupSpec& group, std::shared_ptr<gloo::Context> context,
                                   std::chrono::milliseconds timeout, Recorder recorder,
                                   std::shared_ptr<gloo::Context> sync_context, RankWatch* watch)
    : name_(group.name),
      members_(group.members),
      rank_(context->rank),
      timeout_(timeout),
      recorder_(std::move(recorder)),
      context_(std::move(context)),
      watch_(watch) {
  if (sync_context && gloo_small_message_bytes() > 0)
    sync_ = std::make_unique<GlooSyncCollectives>(members_, std::move(sync_context), gloo_small_message_bytes());
  if (watch_) watch_slot_ = watch_->add_group(name_, members_);
}

GlooCommunicator::~GlooCommunicator() = default;

template <typename Body>
void GlooCommunicator::run(CollectiveKind kind, size_t bytes, Body&& body) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t seq = watch_ ? watch_->enter(watch_slot_, kind) : 0;
  try {
    body();
  } catch (const gloo::Exception& e) {
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (watch_) {
      // Still "in" the collective while it asks: a peer asking this rank at the same moment
      // (all the waiting ranks time out together) must see it waiting here, not idle.
      std::string message = watch_->explain_failure(watch_slot_, seq, kind, bytes, elapsed, timeout_, e.what());
      watch_->leave(watch_slot_);
      throw CommError(std::move(message));
    }
    throw CommError(std::string(collective_name(kind)) + " on axis '" + name_ + "' (world ranks " +
                    format_ranks(members_) + ", " + std::to_string(bytes) + " bytes) " +
                    (elapsed >= timeout_
                         ? "timed out after " + std::to_string(timeout_.count()) + " ms: a peer did not arrive ("
                         : "failed after " + std::to_string(elapsed.count()) +
                               " ms: a peer's connection broke (it died, or gave up first) (") +
                    e.what() + ")");
  } catch (...) {
    if (watch_) watch_->leave(watch_slot_);
    throw;
  }
  if (watch_) watch_->leave(watch_slot_);
  if (recorder_)
    recorder_({kind, bytes,
               std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start),
               CollectiveThread::on_collective_thread()});
}

void GlooCommunicator::finish_started() {
  if (thread_) thread_->wait_all();
}

CollectiveThread& GlooCommunicator::thread() {
  if (!thread_) thread_ = std::make_unique<CollectiveThread>();
  return *thread_;
}

Communicator::Ticket GlooCommunicator::start_all_reduce(void* buf, size_t count, ElementType type) {
  return thread().submit([=, this] { all_reduce_now(buf, count, type); });
}

Communicator::Ticket GlooCommunicator::start_all_gather(const void* in, void* out, size_t count, ElementType type) {
  return thread().submit([=, this] { all_gather_now(in, out, count, type); });
}

Communicator::Ticket GlooCommunicator::start_reduce_scatter(const void* in, void* out, size_t count, ElementType type) {
  return thread().submit([=, this] { reduce_scatter_now(in, out, count, type); });
}

Communicator::Ticket GlooCommunicator::start_all_to_all(const void* in, void* out, size_t count, ElementType type) {
  return thread().submit([=, this] { all_to_all_now(in, out, count, type); });
}

// The lambda holds its own copies of the counts: the caller's may be gone when it runs. The
// checks run now, so a bad call throws here rather than at finish.
Communicator::Ticket GlooCommunicator::start_all_to_allv(const void* in, const std::vector<size_t>& send_counts,
                                                         void* out, const std::vector<size_t>& recv_counts,
                                                         ElementType type) {
  (void)all_to_allv_bytes(send_counts, recv_counts, type);
  return thread().submit([=, this] { all_to_allv_now(in, send_counts, out, recv_counts, type); });
}

void GlooCommunicator::finish(Ticket ticket) {
  if (thread_) thread_->wait(ticket);
}

std::chrono::nanoseconds GlooCommunicator::started_wait_time() const {
  return thread_ ? thread_->waited() : std::chrono::nanoseconds{0};
}

void GlooCommunicator::all_reduce(void* buf, size_t count, ElementType type) {
  finish_started();
  all_reduce_now(buf, count, type);
}

void GlooCommunicator::all_gather(const void* in, void* out, size_t count, ElementType type) {
  finish_started();
  all_gather_now(in, out, count, type);
}

void GlooCommunicator::all_reduce_now(void* buf, size_t count, ElementType type) {
  const size_t bytes = count * element_size(type);
  run(CollectiveKind::all_reduce, bytes, [&] {
    if (on_sync_pairs(CollectiveKind::all_reduce, bytes)) return sync_->all_reduce(buf, count, type);
    gloo::AllreduceOptions opts(context_);
    if (type == ElementType::float32) {
      opts.setOutput(static_cast<float*>(buf), count);
      opts.setReduceFunction(&sum_float32);
    } else {
      opts.setOutput(static_cast<uint16_t*>(buf), count);
      opts.setReduceFunction(&sum_bfloat16);
    }
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

void GlooCommunicator::all_gather_now(const void* in, void* out, size_t count, ElementType type) {
  const size_t block = count * element_size(type);
  run(CollectiveKind::all_gather, block * members_.size(), [&] {
    if (on_sync_pairs(CollectiveKind::all_gather, block * members_.size()))
      return sync_->all_gather(in, out, count, type);
    gloo::AllgatherOptions opts(context_);
    // Gloo copies the input into the output's own block itself; in place (the input is that
    // block already) it is given no input, which is Gloo's in-place call.
    if (in != static_cast<const char*>(out) + block * static_cast<size_t>(rank_))
      opts.setInput(const_cast<char*>(static_cast<const char*>(in)), block);
    opts.setOutput(static_cast<char*>(out), block * members_.size());
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

// On the sync pairs (gloo_sync.hpp) where they take the call. Otherwise a ring reduce-scatter
// over Gloo's unbound buffers, in the same order: at step s (0..n-2) rank r sends its running
// sum of block (r-s-1) mod n to the right and adds the left's sum of block (r-s-2) mod n;
// after n-1 steps it holds the full sum of block r. Each rank sends (n-1)/n of the input.
// Block b is therefore summed in ring order from rank b+1: ((x_{b+1} + x_{b+2}) + ...) + x_b.
// The running sums live in a copy of the input, or, in place (out is the input's block r),
// in the input itself, whose other blocks are then left holding partial sums; either way
// the scratch holds one received block besides.
void GlooCommunicator::reduce_scatter(const void* in, void* out, size_t count, ElementType type) {
  finish_started();
  reduce_scatter_now(in, out, count, type);
}

void GlooCommunicator::reduce_scatter_now(const void* in, void* out, size_t count, ElementType type) {
  const size_t block = count * element_size(type);
  const int n = size();
  run(CollectiveKind::reduce_scatter, block * static_cast<size_t>(n), [&] {
    if (on_sync_pairs(CollectiveKind::reduce_scatter, block * static_cast<size_t>(n)))
      return sync_->reduce_scatter(in, out, count, type);
    const bool in_place = out == static_cast<const char*>(in) + block * static_cast<size_t>(rank_);
    scratch_.resize(block * static_cast<size_t>(in_place ? 1 : n + 1));
    char* incoming = scratch_.data();
    char* work = in_place ? static_cast<char*>(out) - block * static_cast<size_t>(rank_) : scratch_.data() + block;
    if (!in_place) std::memcpy(work, in, block * static_cast<size_t>(n));
    const int right = (rank_ + 1) % n;
    const int left = (rank_ + n - 1) % n;
    const uint64_t tag = next_tag();
    auto recv_buf = context_->createUnboundBuffer(incoming, block);
    for (int s = 0; s + 1 < n; ++s) {
      const int send_block = ((rank_ - s - 1) % n + n) % n;
      const int recv_block = ((rank_ - s - 2) % n + n) % n;
      const uint64_t slot = kReduceScatterSlotPrefix | (tag << 16) | static_cast<uint64_t>(s);
      auto send_buf = context_->createUnboundBuffer(work + block * static_cast<size_t>(send_block), block);
      send_buf->send(right, slot);
      recv_buf->recv(left, slot);
      recv_buf->waitRecv(timeout_);
      send_buf->waitSend(timeout_);
      add_into(work + block * static_cast<size_t>(recv_block), incoming, count, type);
    }
    if (!in_place) std::memcpy(out, work + block * static_cast<size_t>(rank_), block);
  });
}

void GlooCommunicator::broadcast(void* buf, size_t count, int root, ElementType type) {
  const size_t bytes = count * element_size(type);
  if (root < 0 || root >= size())
    throw CommError("broadcast on group '" + name_ + "': root " + std::to_string(root) + " is not in [0, " +
                    std::to_string(size()) + ")");
  finish_started();
  run(CollectiveKind::broadcast, bytes, [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<char*>(buf), bytes);
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

void GlooCommunicator::all_to_all(const void* in, void* out, size_t count, ElementType type) {
  finish_started();
  all_to_all_now(in, out, count, type);
}

void GlooCommunicator::all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                                   const std::vector<size_t>& recv_counts, ElementType type) {
  finish_started();
  all_to_allv_now(in, send_counts, out, recv_counts, type);
}

// Gloo's all-to-all moves bytes: the buffers are given as chars, whatever the element type.
// Every rank sends block j to rank j and receives block j from rank j at once (each pair's
// messages under this call's tag), so no ordering can deadlock.
void GlooCommunicator::all_to_all_now(const void* in, void* out, size_t count, ElementType type) {
  const size_t bytes = count * element_size(type) * members_.size();
  run(CollectiveKind::all_to_all, bytes, [&] {
    if (bytes == 0) return;  // the same count on every rank: nobody sends anything
    if (on_sync_pairs(CollectiveKind::all_to_all, bytes)) return sync_->all_to_all(in, out, count, type);
    gloo::AlltoallOptions opts(context_);
    opts.setInput(const_cast<char*>(static_cast<const char*>(in)), bytes);
    opts.setOutput(static_cast<char*>(out), bytes);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::alltoall(opts);
  });
}

// Counts in bytes per peer (Gloo's lengths are in elements of the type it is given: chars).
// A rank with nothing to send or receive still takes part, as its peers' zero-length
// messages to it must be matched; an empty buffer is then given a stand-in address, which
// Gloo reads and writes nothing at.
void GlooCommunicator::all_to_allv_now(const void* in, const std::vector<size_t>& send_counts, void* out,
                                       const std::vector<size_t>& recv_counts, ElementType type) {
  const size_t bytes = all_to_allv_bytes(send_counts, recv_counts, type);
  const size_t element = element_size(type);
  const auto byte_lengths = [&](const std::vector<size_t>& counts) {
    std::vector<int64_t> lengths;
    for (const size_t c : counts) lengths.push_back(static_cast<int64_t>(c * element));
    return lengths;
  };
  run(CollectiveKind::all_to_all, bytes, [&] {
    char nothing = 0;
    char* send = in ? const_cast<char*>(static_cast<const char*>(in)) : &nothing;
    char* receive = out ? static_cast<char*>(out) : &nothing;
    gloo::AlltoallvOptions opts(context_);
    opts.setInput(send, byte_lengths(send_counts));
    opts.setOutput(receive, byte_lengths(recv_counts));
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::alltoallv(opts);
  });
}

void GlooCommunicator::barrier() {
  finish_started();
  run(CollectiveKind::barrier, 0, [&] {
    if (sync_) return sync_->barrier();
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace axonn
