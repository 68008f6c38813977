// One run per checkpoint directory (checkpoint/dir_lock.hpp): a live holder in another
// process stops the second run naming it; a record left by a dead process on this host, or by
// an earlier run of the same requeued Slurm job, is taken over saying so; a record from
// another host only with break_lock; a directory that cannot be written is refused by name.
// fcntl locks belong to processes, so the holders here are forked children.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/dir_lock.hpp"
#include "scratch_dir.hpp"

// File systems without fcntl locks (NFS mounted with nolock) answer F_SETLK with ENOLCK. This
// test binary stands in for one: its own fcntl, which the checkpoint library (linked
// statically into it) calls instead of the C library's, refuses F_SETLK with ENOLCK while
// g_no_fcntl_locks is set and passes every call on otherwise.
std::atomic<bool> g_no_fcntl_locks{false};

extern "C" int fcntl(int fd, int cmd, ...) {
  va_list args;
  va_start(args, cmd);
  void* arg = va_arg(args, void*);  // an int or a pointer: the same register either way, as glibc reads it
  va_end(args);
  if (cmd == F_SETLK && g_no_fcntl_locks) {
    errno = ENOLCK;
    return -1;
  }
  using Fcntl = int (*)(int, int, ...);
  static const auto next = reinterpret_cast<Fcntl>(::dlsym(RTLD_NEXT, "fcntl"));
  return next(fd, cmd, arg);
}

namespace axonn {
namespace {

namespace fs = std::filesystem;
using test::ScratchDirTest;

class DirLock : public ScratchDirTest {
 protected:
  fs::path ckpt() const { return dir_ / "ckpt"; }
  std::string record() const {
    std::ifstream in(ckpt() / kLockFileName);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  void write_record(const LockOwner& holder) const {
    fs::create_directories(ckpt());
    std::ofstream(ckpt() / kLockFileName) << holder.record();
  }
  // The message of the DirectoryUnavailable that acquiring throws ("" when it succeeds).
  static std::string refusal(const fs::path& dir, const LockOwner& me, bool break_lock = false) {
    try {
      DirectoryLock lock = DirectoryLock::acquire(dir, me, break_lock);
    } catch (const DirectoryUnavailable& e) {
      return e.what();
    }
    return "";
  }
};

// A child process that takes the lock and holds it until killed.
struct Holder {
  pid_t pid = -1;
  explicit Holder(const fs::path& dir) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      DirectoryLock lock = DirectoryLock::acquire(dir, LockOwner::this_process("77", 0), false);
      const char ok = 1;
      if (::write(ready[1], &ok, 1) != 1) ::_exit(3);
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    char ok = 0;
    if (::read(ready[0], &ok, 1) != 1) pid = -1;
    ::close(ready[0]);
  }
  // SIGKILL: no destructor runs, the record stays behind as after a crash.
  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Holder() { kill(); }
};

TEST_F(DirLock, HoldsTheRecordForItsLifeAndClearsItOnRelease) {
  const LockOwner me = LockOwner::this_process("912345", 2);
  {
    DirectoryLock lock = DirectoryLock::acquire(ckpt(), me, false);
    EXPECT_TRUE(lock.kernel_locked());
    EXPECT_TRUE(lock.note().empty()) << lock.note();
    const std::optional<LockOwner> read = LockOwner::parse(record());
    ASSERT_TRUE(read) << record();
    EXPECT_EQ(read->host, me.host);
    EXPECT_EQ(read->pid, ::getpid());
    EXPECT_EQ(read->slurm_job, "912345");
    EXPECT_EQ(read->slurm_restart, 2);
    EXPECT_EQ(read->since, me.since);
  }
  EXPECT_EQ(record(), "");  // released: the next run takes it without a note
  DirectoryLock again = DirectoryLock::acquire(ckpt(), me, false);
  EXPECT_TRUE(again.note().empty()) << again.note();
}

// Without fcntl locks the record alone decides, as dir_lock.hpp says: a run started while a
// live holder's record is there is refused naming it; the holder's crash leaves a record the
// next run takes over; and the run says that only the record protects the directory.
TEST_F(DirLock, WhereTheFileSystemHasNoFcntlLocksTheRecordAloneStopsALaterRun) {
  struct NoFcntlLocks {
    NoFcntlLocks() { g_no_fcntl_locks = true; }
    ~NoFcntlLocks() { g_no_fcntl_locks = false; }
  } no_locks;
  Holder holder(ckpt());  // forked with the flag set: its lock is a record only
  ASSERT_GT(holder.pid, 0);
  const std::string holder_pid = std::to_string(holder.pid);
  const LockOwner me = LockOwner::this_process("", 0);
  const std::string refused = refusal(ckpt(), me);
  EXPECT_NE(refused.find("pid " + holder_pid + " on host " + me.host), std::string::npos) << refused;
  EXPECT_NE(refused.find("is running and holds"), std::string::npos) << refused;
  holder.kill();
  DirectoryLock lock = DirectoryLock::acquire(ckpt(), me, false);
  EXPECT_FALSE(lock.kernel_locked());
  EXPECT_NE(lock.note().find("took over the lock left by pid " + holder_pid), std::string::npos)
      << lock.note();
  EXPECT_NE(lock.note().find("refused an fcntl lock, so only the record in " + (ckpt() / kLockFileName).string() +
                             " protects the directory"),
            std::string::npos)
      << lock.note();
}

TEST_F(DirLock, ALiveHolderStopsASecondRunNamingItEvenWithBreakLock) {
  Holder holder(ckpt());
  ASSERT_GT(holder.pid, 0);
  for (bool break_lock : {false, true}) {
    const std::string why = refusal(ckpt(), LockOwner::this_process("", 0), break_lock);
    EXPECT_NE(why.find("checkpoint directory " + ckpt().string() + " is in use: pid " + std::to_string(holder.pid) +
                       " on host "),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("Slurm job 77"), std::string::npos) << why;
    EXPECT_NE(why.find("another checkpoint.dir"), std::string::npos) << why;
  }
}

TEST_F(DirLock, ARecordLeftByADeadProcessOnThisHostIsTakenOverSayingSo) {
  Holder holder(ckpt());
  ASSERT_GT(holder.pid, 0);
  const pid_t dead = holder.pid;
  holder.kill();
  ASSERT_NE(record(), "") << "kill -9 should leave the record";
  DirectoryLock lock = DirectoryLock::acquire(ckpt(), LockOwner::this_process("", 0), false);
  EXPECT_NE(lock.note().find("took over the lock left by pid " + std::to_string(dead)), std::string::npos)
      << lock.note();
  EXPECT_NE(lock.note().find("no longer running"), std::string::npos) << lock.note();
  EXPECT_EQ(LockOwner::parse(record())->pid, ::getpid());
}

TEST_F(DirLock, ARecordFromAnotherHostNeedsBreakLock) {
  LockOwner other{"node-elsewhere", 4242, "500", 0, "2026-01-01T00:00:00Z"};
  write_record(other);
  const LockOwner me = LockOwner::this_process("", 0);
  const std::string why = refusal(ckpt(), me);
  EXPECT_NE(why.find("pid 4242 on host node-elsewhere (Slurm job 500, since 2026-01-01T00:00:00Z) took and has "
                     "not released"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("--break-lock"), std::string::npos) << why;
  EXPECT_EQ(LockOwner::parse(record())->host, "node-elsewhere");  // untouched
  DirectoryLock lock = DirectoryLock::acquire(ckpt(), me, true);
  EXPECT_NE(lock.note().find("broke the lock left by pid 4242 on host node-elsewhere"), std::string::npos)
      << lock.note();
}

TEST_F(DirLock, AnEarlierRunOfTheSameRequeuedSlurmJobIsTakenOverOnAnyHost) {
  write_record(LockOwner{"node-a", 4242, "500", 0, "2026-01-01T00:00:00Z"});
  // The same job at the same restart count on another host: a second step, maybe alive.
  EXPECT_NE(refusal(ckpt(), LockOwner{"node-b", 99, "500", 0, "now"}), "");
  // Another job: refused too.
  EXPECT_NE(refusal(ckpt(), LockOwner{"node-b", 99, "501", 1, "now"}), "");
  // The job requeued (SLURM_RESTART_COUNT went up): Slurm ended the earlier run first.
  DirectoryLock lock = DirectoryLock::acquire(ckpt(), LockOwner{"node-b", ::getpid(), "500", 1, "now"}, false);
  EXPECT_NE(lock.note().find("an earlier run of this Slurm job (restart 0; this is restart 1)"), std::string::npos)
      << lock.note();
}

TEST_F(DirLock, AnUnreadableRecordIsReplacedWhenTheKernelLockIsFree) {
  fs::create_directories(ckpt());
  std::ofstream(ckpt() / kLockFileName) << "not a record";
  DirectoryLock lock = DirectoryLock::acquire(ckpt(), LockOwner::this_process("", 0), false);
  EXPECT_NE(lock.note().find("replaced an unreadable lock record"), std::string::npos) << lock.note();
}

TEST_F(DirLock, RecordsRoundTripAndGarbageIsNotOne) {
  const LockOwner owner{"n1", 12, "9", 3, "2026-11-26T07:12:03Z"};
  const std::optional<LockOwner> back = LockOwner::parse(owner.record());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->record(), owner.record());
  EXPECT_EQ(owner.describe(), "pid 12 on host n1 (Slurm job 9 restart 3, since 2026-11-26T07:12:03Z)");
  for (const char* bad : {"", "host=n1\n", "pid=12\n", "host=n1\npid=-3\n", "host=n1\npid=12x\n", "host=\npid=1\n"})
    EXPECT_FALSE(LockOwner::parse(bad)) << bad;
}

TEST_F(DirLock, ADirectoryThatCannotBeCreatedIsRefusedByName) {
  std::ofstream(dir_ / "a-file") << "x";
  const std::string why = refusal(dir_ / "a-file" / "ckpt", LockOwner::this_process("", 0));
  EXPECT_NE(why.find((dir_ / "a-file" / "ckpt").string()), std::string::npos) << why;
  EXPECT_NE(why.find("set checkpoint.dir to a directory this user can create"), std::string::npos) << why;
}

TEST_F(DirLock, AReadOnlyFileSystemIsRefusedByName) {
  // A private mount namespace, so the read-only tmpfs vanishes with this process; root (or a
  // user namespace) is needed to mount, as for the disk-full test.
  if (::unshare(CLONE_NEWNS) != 0)
    GTEST_SKIP() << "unshare(CLONE_NEWNS) failed (" << std::strerror(errno) << "): no mount permission here";
  ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << std::strerror(errno);
  fs::create_directories(ckpt());
  if (::mount("tmpfs", ckpt().c_str(), "tmpfs", MS_RDONLY, "size=1m") != 0)
    GTEST_SKIP() << "mounting a read-only tmpfs failed (" << std::strerror(errno) << ")";
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{ckpt()};
  const std::string why = refusal(ckpt(), LockOwner::this_process("", 0));
  EXPECT_NE(why.find("cannot write the checkpoint directory " + ckpt().string()), std::string::npos) << why;
  EXPECT_NE(why.find("Read-only file system"), std::string::npos) << why;
}

}  // namespace
}  // namespace axonn
