#include "trainer/train/run_directory.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/step_dir.hpp"
#include "core/number_text.hpp"
#include "trainer/train/host_exchange.hpp"

namespace axonn {
namespace {

// A save writes the new step beside the committed one before retention deletes the older:
// the directory needs room for two checkpoints at once.
void warn_if_space_is_short(const std::filesystem::path& dir, int64_t checkpoint_bytes) {
  const std::optional<int64_t> free = free_bytes(dir);
  const int64_t needed = 2 * checkpoint_bytes;
  if (!free || *free >= needed) return;
  spdlog::warn(
      "checkpoint: only {:.1f} MiB free on the file system of {}; a save needs room for two checkpoints of this "
      "model ({:.1f} MiB each: every parameter and both AdamW moments in float32), {:.1f} MiB in all: free "
      "{:.1f} MiB there, or saves will fail (and stop the run) when the disk fills",
      in_mib(*free), dir.string(), in_mib(checkpoint_bytes), in_mib(needed), in_mib(needed - *free));
}

// run.dir created and a file written and removed there, as the metrics log will.
void check_run_dir(const std::filesystem::path& dir) {
  const auto unavailable = [&](const std::string& why) {
    return DirectoryUnavailable(dir.string(), "prepare",
                                "run.dir " + dir.string() + ": " + why +
                                    "; set run.dir to a directory this user can write (metrics, summary, traces)");
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw unavailable(ec.message());
  const std::filesystem::path probe = dir / (".axonn-write-check-" + std::to_string(getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) throw unavailable(std::strerror(errno));
  std::fclose(f);
  std::filesystem::remove(probe, ec);
}

}  // namespace

std::optional<DirectoryLock> open_run_directory(Backend& backend, Communicator& world, const std::filesystem::path& dir,
                                                const RunDirectoryOptions& options) {
  std::optional<DirectoryLock> lock;
  std::exception_ptr failure;
  int64_t outcome = 0;  // 0 ok, 1 the directory is unavailable (bad input), 2 another I/O failure
  if (world.rank() == 0) {
    try {
      lock.emplace(DirectoryLock::acquire(dir, options.owner, options.break_lock));
      if (!lock->note().empty()) spdlog::warn("checkpoint: {}", lock->note());
      remove_uncommitted(dir);  // what a crashed save left; only the lock holder may
      warn_if_space_is_short(dir, options.checkpoint_bytes);
      if (!options.run_dir.empty()) check_run_dir(options.run_dir);
    } catch (const DirectoryUnavailable&) {
      failure = std::current_exception();
      outcome = 1;
    } catch (const CheckpointError&) {
      failure = std::current_exception();
      outcome = 2;
    }
  }
  outcome = all_gather_integers(backend, world, outcome).front();
  if (failure) std::rethrow_exception(failure);
  const std::string what = "rank 0 could not prepare the checkpoint directory " + dir.string() +
                           " or run.dir (its message says why); nothing was trained";
  if (outcome == 1) throw DirectoryUnavailable(dir.string(), "lock", what);
  if (outcome == 2) throw CheckpointError(dir.string(), "prepare", what);
  return lock;
}

}  // namespace axonn
