#pragma once
// One run per checkpoint directory. A run's start-up deletes what crashed saves left
// (.tmp-step-*), and retention deletes old steps: two runs on one directory (a requeued job
// whose old step is still running, two users sharing a template) would delete each other's
// saves. So a run holds <dir>/run.lock for its whole life:
//
//   - an fcntl write lock on the file (POSIX record lock: Lustre and NFSv4 honour it across
//     hosts; the kernel drops it when the process dies, kill -9 included), and
//   - the holder written in the file, one key per line, removed again at a clean exit:
//       host=node17
//       pid=48213
//       slurm_job=912345        (empty outside Slurm)
//       slurm_restart=0         (SLURM_RESTART_COUNT: how often the job was requeued)
//       since=2026-11-26T07:12:03Z
//
// A record whose process is gone is taken over, saying so: a dead process on this host, or an
// earlier run of the same Slurm job (a requeued job keeps its id and counts up its restarts,
// and Slurm starts it again only after the old run ended). A record from another host is not taken over unless the
// caller breaks the lock: that host's run may be alive on a file system whose locks do not
// reach across hosts. Where the file system has no fcntl locks at all (ENOLCK: NFS mounted
// with nolock), the record alone decides: it stops a run that starts after the holder wrote
// it, not one that starts within the same instant.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace axonn {

inline constexpr const char* kLockFileName = "run.lock";

struct LockOwner {
  std::string host;
  int64_t pid = 0;
  std::string slurm_job;     // "" outside Slurm
  int64_t slurm_restart = 0;  // SLURM_RESTART_COUNT (0 before the first requeue)
  std::string since;          // UTC, ISO 8601

  // This process: its host name and pid, the time now, and the given Slurm job and restart.
  static LockOwner this_process(std::string slurm_job, int64_t slurm_restart);
  // "pid 48213 on host node17 (Slurm job 912345, since 2026-11-26T07:12:03Z)"
  std::string describe() const;
  // The file's text, and back; nullopt for a record that is not one (empty: released).
  std::string record() const;
  static std::optional<LockOwner> parse(const std::string& record);
};

class DirectoryLock {
 public:
  // Creates `dir` if needed and takes its lock for `me`, or throws DirectoryUnavailable
  // naming the holder (or why the directory cannot be written). `break_lock` takes over a
  // record left by another host; it never takes a lock a live process holds.
  static DirectoryLock acquire(const std::filesystem::path& dir, const LockOwner& me, bool break_lock);

  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&&) = delete;
  DirectoryLock(const DirectoryLock&) = delete;
  // Clears the record and drops the fcntl lock (errors are ignored: the run is over).
  ~DirectoryLock();

  // What acquiring had to do besides taking a free lock, for the run's log ("took over the
  // lock left by pid 4121 on host n1 (...), which is no longer running"); empty otherwise.
  const std::string& note() const { return note_; }
  // False where the file system refused fcntl locks and only the record protects the directory.
  bool kernel_locked() const { return kernel_locked_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  DirectoryLock(std::filesystem::path path, int fd, bool kernel_locked, std::string note)
      : path_(std::move(path)), fd_(fd), kernel_locked_(kernel_locked), note_(std::move(note)) {}

  std::filesystem::path path_;
  int fd_ = -1;
  bool kernel_locked_ = false;
  std::string note_;
};

}  // namespace axonn
