#pragma once
// Asynchronous save: the caller blocks only while its slices are copied into the saver's
// host buffers; a writer thread then writes the shard (and, on the committing rank, commits)
// while training goes on. At most one save is in flight: a new save first waits for the
// previous one. A writer error is never lost: it is rethrown by the next poll(), wait() or
// save() (the original typed exception, naming the file).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/commit.hpp"
#include "checkpoint/metadata.hpp"
#include "checkpoint/rect.hpp"

namespace axonn {

// What the committing rank needs besides its own shard.
struct CommitSpec {
  std::vector<int> expected_ranks;  // every rank that writes a shard of this step
  Metadata metadata;
  std::vector<int64_t> protected_steps = {};  // never deleted by retention (apply_retention)
};

struct SaverOptions {
  int keep = 2;  // committed steps kept
  std::chrono::milliseconds commit_timeout{std::chrono::minutes(10)};
  std::string save_token;  // same on every rank of one run
  // Called on the writer thread when a save's background part (the shard written, and the
  // commit on the committing rank) has ended, well or not: its step, start and end. For a
  // timeline (the trainer's trace); empty: nothing is called.
  std::function<void(int64_t step, std::chrono::steady_clock::time_point start,
                     std::chrono::steady_clock::time_point end)>
      on_written;
  // Instead of write_shard and commit: called on the writer thread with the staged slices (the
  // saver's copies) and the CommitSpec the committing rank passed (nullopt on the others).
  // Memory copies (trainer/train/memory_copies.hpp) keep and send a raw copy here; its error
  // is the save's.
  std::function<void(int64_t step, std::span<const TensorSlice> staged, const std::optional<CommitSpec>& commit)>
      write_instead;
};

class AsyncSaver {
 public:
  AsyncSaver(std::filesystem::path dir, int rank, SaverOptions options = {});
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;
  // Waits for a save in flight. An error nobody observed is printed to stderr (a destructor
  // cannot throw): call wait() before destruction to handle it.
  ~AsyncSaver();

  // Waits for the previous save (rethrowing its error), copies the slices (validated here,
  // in the caller's thread), starts writing and returns. `commit`: only on the committing rank.
  void save(int64_t step, std::span<const TensorSlice> slices, std::optional<CommitSpec> commit = std::nullopt);
  // True when nothing is in flight; rethrows a finished save's error once.
  bool poll();
  // Blocks until nothing is in flight; rethrows its error once.
  void wait();
  // For a rank leaving after a failure: a commit in flight, now or later, waits for the other
  // ranks' shards only as long again as this rank's own shard took to write (the surviving
  // ranks finish theirs; the failed ranks never write theirs), then fails with `latest`
  // unchanged, so the destructor's wait ends soon; this rank's own shard is still written.
  void abandon() { stop_.request_stop(); }

  // Time the last save() blocked its caller: waiting for the previous save, then copying.
  std::chrono::nanoseconds last_wait() const { return last_wait_; }
  std::chrono::nanoseconds last_copy() const { return last_copy_; }
  // The last successful commit made by this saver.
  const std::optional<CommitResult>& last_commit() const { return last_commit_; }

 private:
  void rethrow_pending();

  std::filesystem::path dir_;
  int rank_;
  SaverOptions options_;
  std::vector<std::vector<float>> buffers_;  // reused between saves when sizes allow
  std::vector<TensorSlice> staged_;
  std::thread worker_;
  std::atomic<bool> done_{true};
  std::exception_ptr error_;
  int64_t error_step_ = -1;
  std::optional<CommitResult> pending_commit_;
  std::optional<CommitResult> last_commit_;
  std::stop_source stop_;  // abandon()
  std::chrono::nanoseconds last_wait_{0};
  std::chrono::nanoseconds last_copy_{0};
};

}  // namespace axonn
