#pragma once
// Communicator over Gloo's TCP transport (CPU path), on a context that
// connect_gloo_groups (gloo_mesh.hpp) connected. Started collectives (start_*) run on a
// CollectiveThread made at the first one; the blocking calls run on the caller's thread
// once the started ones have ended, so the context is used by one thread at a time.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/collective_thread.hpp"
#include "comm/communicator.hpp"
#include "comm/gloo_mesh.hpp"
#include "comm/gloo_sync.hpp"
#include "comm/rank_watch.hpp"

namespace axonn {

// With a sync context, all-reduces (and barriers) up to this many bytes are one message,
// and every larger collective moves as a ring of pieces (gloo_sync.hpp):
// AXONN_GLOO_SMALL_BYTES if set (0 turns the sync pairs off, so every collective is Gloo's
// own; it must be the same on every rank, as the job's environment is), else 64 KiB.
size_t gloo_small_message_bytes();

class GlooCommunicator final : public Communicator {
 public:
  using Recorder = std::function<void(const CollectiveRecord&)>;

  // context: connected for `group`; recorder: called after every collective (may be empty).
  // sync_context: a second connected context of the group, whose pairs gloo_sync.hpp
  // switches to sync mode and runs the calls it takes on (GlooSyncCollectives::takes); the
  // others, and every call without one, run Gloo's own collectives (and a ring
  // reduce-scatter of Gloo's unbound buffers).
  // watch: this rank's RankWatch (outlives the communicator), which a failed collective asks
  // who did not arrive; null: the message says only that a peer did not arrive or died.
  GlooCommunicator(const GroupSpec& group, std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout,
                   Recorder recorder, std::shared_ptr<gloo::Context> sync_context = nullptr,
                   RankWatch* watch = nullptr);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const override { return members_; }
  const std::string& name() const override { return name_; }
  // The largest size the sync pairs take (comm/gloo_sync.hpp), when it has them: above it
  // Gloo's own collectives, whose hand-offs between threads cost milliseconds a call where
  // ranks outnumber the cores (8 CPU ranks on 2 cores: a 512 KiB all-reduce 4.8 ms, 1 MiB
  // 21 ms, 2 MiB 20 ms), a second line for calibrate to fit.
  size_t small_path_bytes(CollectiveKind kind) const override { return sync_ ? sync_->largest_taken(kind) : 0; }
  // Whether a call of `kind` over `bytes` (nccl-tests size) runs on the sync pairs
  // (gloo_sync.hpp), rather than through Gloo's own collectives.
  bool on_sync_pairs(CollectiveKind kind, size_t bytes) const { return sync_ && sync_->takes(kind, bytes); }

  void all_reduce(void* buf, size_t count, ElementType type) override;
  void all_gather(const void* in, void* out, size_t count, ElementType type) override;
  void reduce_scatter(const void* in, void* out, size_t count, ElementType type) override;
  void broadcast(void* buf, size_t count, int root, ElementType type) override;
  void all_to_all(const void* in, void* out, size_t count, ElementType type) override;
  void all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                   const std::vector<size_t>& recv_counts, ElementType type) override;
  void barrier() override;
  Ticket start_all_reduce(void* buf, size_t count, ElementType type) override;
  Ticket start_all_gather(const void* in, void* out, size_t count, ElementType type) override;
  Ticket start_reduce_scatter(const void* in, void* out, size_t count, ElementType type) override;
  Ticket start_all_to_all(const void* in, void* out, size_t count, ElementType type) override;
  Ticket start_all_to_allv(const void* in, const std::vector<size_t>& send_counts, void* out,
                           const std::vector<size_t>& recv_counts, ElementType type) override;
  void finish(Ticket ticket) override;
  std::chrono::nanoseconds started_wait_time() const override;

 private:
  // The collectives themselves, on whichever thread calls them.
  void all_reduce_now(void* buf, size_t count, ElementType type);
  void all_gather_now(const void* in, void* out, size_t count, ElementType type);
  void reduce_scatter_now(const void* in, void* out, size_t count, ElementType type);
  void all_to_all_now(const void* in, void* out, size_t count, ElementType type);
  void all_to_allv_now(const void* in, const std::vector<size_t>& send_counts, void* out,
                       const std::vector<size_t>& recv_counts, ElementType type);
  CollectiveThread& thread();  // made at the first use
  // Before a blocking call: lets the started collectives end (and rethrows their error).
  void finish_started();
  // Runs one collective: times it, records it, turns Gloo's errors into CommError (which
  // says "timed out" only when the timeout passed, "failed" when the peer's end broke first).
  template <typename Body>
  void run(CollectiveKind kind, size_t bytes, Body&& body);
  uint32_t next_tag() { return tag_++; }

  std::string name_;
  std::vector<int> members_;
  int rank_ = 0;
  std::chrono::milliseconds timeout_;
  Recorder recorder_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<GlooSyncCollectives> sync_;  // null: Gloo's own collectives only
  std::vector<char> scratch_;                    // reduce-scatter's working copy and receive buffer
  uint32_t tag_ = 0;
  RankWatch* watch_ = nullptr;
  int watch_slot_ = -1;
  std::unique_ptr<CollectiveThread> thread_;  // made by the first start_*
};

}  // namespace axonn
