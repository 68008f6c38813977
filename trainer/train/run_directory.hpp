#pragma once
// The checkpoint and run directories at a run's start, before any rank computes. Rank 0 takes
// the checkpoint directory's lock (checkpoint/dir_lock.hpp: one run per directory; taking it
// also proves the directory writable), deletes what crashed saves left (.tmp-step-*,
// .trash-step-*), compares the free space with what saving needs, and creates run.dir and
// writes a file there (metrics, summary, traces go there); every rank then learns whether
// rank 0 could, so a directory another run holds or one that cannot be written stops every
// rank with the same error and exit code instead of leaving the others waiting in their
// first collective.
#include <cstdint>
#include <filesystem>
#include <optional>

#include "checkpoint/dir_lock.hpp"
#include "comm/communicator.hpp"
#include "trainer/backend.hpp"

namespace axonn {

struct RunDirectoryOptions {
  LockOwner owner;               // who rank 0 is, written into the lock
  bool break_lock = false;       // take over a lock record left by another host
  int64_t checkpoint_bytes = 0;  // one committed step of this model (checkpoint_payload_bytes)
  std::filesystem::path run_dir;  // the job's run.dir; empty: not checked
};

// The lock on rank 0 (held until it is destroyed, at the end of the run), nullopt on the
// others. Throws DirectoryUnavailable on every rank when rank 0 could not take or write the
// checkpoint directory or run.dir (rank 0's names the holder or the failing call).
std::optional<DirectoryLock> open_run_directory(Backend& backend, Communicator& world, const std::filesystem::path& dir,
                                                const RunDirectoryOptions& options);

}  // namespace axonn
