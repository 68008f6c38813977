// Crash safety: a saving process killed with SIGKILL at random points never leaves a
// `latest` that fails to load or verify; a save that runs out of disk (a small tmpfs in a
// private mount namespace, or RLIMIT_FSIZE) throws clearly and the previous `latest` loads.
// SIGKILL kills the process, not the machine: the page cache survives, so this checks the
// ordering of renames, not the fsyncs (those are what make the same order hold after a
// power loss).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "checkpoint/async_saver.hpp"
#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/step_dir.hpp"
#include "checkpoint/verify.hpp"
#include "checkpoint_test_model.hpp"

namespace axonn {
namespace {

using namespace ckpt_test;
using Clock = std::chrono::steady_clock;

// The small model plus one 2 MiB weight, so a save spends most of its time writing data.
std::vector<TensorSpec> crash_model() {
  auto m = small_model();
  m.push_back(TensorSpec{"blocks/0/mlp.proj", {512, 1024}});
  return m;
}

void save_two_ranks(const fs::path& dir, int64_t step, const std::vector<TensorSpec>& model) {
  for (int r = 0; r < 2; ++r) {
    RankState st = rank_state(model, row_tiles, r, 2, step);
    write_shard(dir, step, r, st.slices);
  }
  const std::vector<int> ranks = {0, 1};
  commit(dir, step, ranks, test_metadata(step), 2, std::chrono::seconds(10));
}

// Loads `latest` at another tiling and verifies it; returns its step.
int64_t expect_latest_sound(const fs::path& dir, const std::vector<TensorSpec>& model) {
  const auto latest = read_latest(dir);
  EXPECT_TRUE(latest);
  if (!latest) return -1;
  for (int r = 0; r < 3; ++r) {
    RankTargets t = rank_targets(model, col_tiles, r, 3);
    const LoadResult res = load_checkpoint(dir, t.reads);
    EXPECT_EQ(res.step, *latest);
    expect_rank_values(model, t, *latest);
  }
  const VerifyReport report = verify_checkpoint(step_path(dir, *latest));
  EXPECT_TRUE(report.ok()) << format_verify_report(report);
  return *latest;
}

// Returns once `latest` names a step after `step` (the saver `pid` committed one), or once
// the saver has exited (left for the caller's waitpid to report).
void wait_for_a_commit_after(const fs::path& dir, int64_t step, pid_t pid) {
  while (read_latest(dir).value_or(0) <= step) {
    siginfo_t exited{};
    if (waitid(P_PID, static_cast<id_t>(pid), &exited, WEXITED | WNOHANG | WNOWAIT) == 0 && exited.si_pid == pid)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(CheckpointCrash, KillNineAtRandomPointsNeverBreaksLatest) {
  const fs::path dir = test_dir();
  const auto model = crash_model();
  const auto t0 = Clock::now();
  save_two_ranks(dir, 1, model);
  const auto save_us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
  std::mt19937 rng(20261122);
  // How far into a saver's run (from its start, or from its first commit) the kill lands: up
  // to several saves.
  std::uniform_int_distribution<long> delay_us(0, std::max<long>(8 * save_us, 20000));
  for (int iteration = 0; iteration < 20; ++iteration) {
    const int64_t before = *read_latest(dir);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      // The saving "job": clean up what a crash left, continue from latest, save forever.
      try {
        remove_uncommitted(dir);
        for (int64_t step = read_latest(dir).value_or(0) + 1;; ++step) save_two_ranks(dir, step, model);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "saver failed: %s\n", e.what());
      }
      _exit(3);
    }
    // Every other saver is killed from its start on (in its cleanup of the last crash, too);
    // the others only once they committed a step, so that the kills land in ever later saves
    // however slowly the machine runs them.
    const bool after_a_commit = iteration % 2 == 1;
    if (after_a_commit) wait_for_a_commit_after(dir, before, pid);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saver exited by itself with status " << status;
    // A crash never takes `latest` back, and a commit moved it on.
    EXPECT_GE(expect_latest_sound(dir, model), after_a_commit ? before + 1 : before) << "iteration " << iteration;
  }
  // Whatever the kills left behind, the next start cleans it and saves again.
  remove_uncommitted(dir);
  const int64_t next = *read_latest(dir) + 1;
  save_two_ranks(dir, next, model);
  EXPECT_EQ(expect_latest_sound(dir, model), next);
}

// A 4 MiB tensor: more than the small file system holds.
std::vector<TensorSpec> too_big_model() { return {{"big", {1024, 1024}}}; }

TEST(CheckpointCrash, DiskFullSaveThrowsClearlyAndThePreviousLatestLoads) {
  const fs::path base = test_dir();
  // A private mount namespace: the tmpfs disappears with this process even if it crashes.
  if (unshare(CLONE_NEWNS) != 0) {
    GTEST_SKIP() << "unshare(CLONE_NEWNS) failed (" << std::strerror(errno)
                 << "): no mount permission here; FileSizeLimitSaveThrowsClearly covers the failing write";
  }
  ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << std::strerror(errno);
  const fs::path dir = base / "small-fs";
  fs::create_directories(dir);
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=2m") != 0) {
    GTEST_SKIP() << "mounting a 2 MiB tmpfs failed (" << std::strerror(errno)
                 << "); FileSizeLimitSaveThrowsClearly covers the failing write";
  }
  struct Unmount {
    fs::path p;
    ~Unmount() { umount2(p.c_str(), MNT_DETACH); }
  } unmount{dir};

  const auto model = small_model();
  save_two_ranks(dir, 1, model);
  RankState big = rank_state(too_big_model(), row_tiles, 0, 1, 2);
  try {
    write_shard(dir, 2, 0, big.slices);
    FAIL() << "a 4 MiB shard fit on a 2 MiB file system";
  } catch (const DiskFull& e) {
    // One line naming the file, what it needs and what is free; no HDF5 stack.
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(what.find("HDF5"), std::string::npos) << what;
    EXPECT_NE(what.find("shard-00000.h5: it needs "), std::string::npos) << what;
    EXPECT_NE(what.find(" free; free "), std::string::npos) << what;
    EXPECT_NE(what.find("`latest` still names the last committed step"), std::string::npos) << what;
    EXPECT_NE(e.file().find("shard-00000.h5"), std::string::npos) << e.file();
  }
  // The partial shard was removed, `latest` still names step 1 and it loads.
  EXPECT_FALSE(fs::exists(tmp_step_path(dir, 2) / "shard-00000.h5.partial"));
  EXPECT_EQ(expect_latest_sound(dir, model), 1);
  // The same through the async saver: the error surfaces on wait().
  AsyncSaver saver(dir, 0);
  saver.save(3, big.slices, CommitSpec{{0}, test_metadata(3)});
  try {
    saver.wait();
    FAIL() << "the async save did not report the full disk";
  } catch (const DiskFull& e) {
    EXPECT_NE(std::string(e.what()).find("it needs "), std::string::npos) << e.what();
  }
  EXPECT_EQ(expect_latest_sound(dir, model), 1);
  // Space freed (retention, cleanup): saving works again.
  remove_uncommitted(dir);
  save_two_ranks(dir, 4, model);
  EXPECT_EQ(expect_latest_sound(dir, model), 4);
}

TEST(CheckpointCrash, FileSizeLimitSaveThrowsClearly) {
  const fs::path dir = test_dir();
  const auto model = small_model();
  save_two_ranks(dir, 1, model);
  // In a child, so the limit does not outlive the test: files may not exceed 1 MiB.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing us
    const rlimit limit{1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(10);
    RankState big = rank_state(too_big_model(), row_tiles, 0, 1, 2);
    try {
      write_shard(dir, 2, 0, big.slices);
    } catch (const CheckpointError& e) {
      const bool clear = std::string(e.what()).find("File too large") != std::string::npos;
      if (!clear) std::fprintf(stderr, "unclear error: %s\n", e.what());
      _exit(clear ? 0 : 11);
    }
    _exit(12);  // no error at all
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit failed, 11: unclear message, 12: no error";
  EXPECT_EQ(expect_latest_sound(dir, model), 1);
}

}  // namespace
}  // namespace axonn
