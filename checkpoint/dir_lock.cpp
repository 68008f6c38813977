#include "checkpoint/dir_lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <sstream>
#include <utility>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

constexpr size_t kMaxRecordBytes = 4096;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm = {};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// kill(pid, 0) succeeds, or fails only for permission: the process exists.
bool process_alive(int64_t pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::string read_record(int fd) {
  std::string text(kMaxRecordBytes, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

bool blank(const std::string& text) { return text.find_first_not_of(" \t\r\n") == std::string::npos; }

void write_record(int fd, const fs::path& path, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) throw_errno(path, "truncate", errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno(path, "write", errno);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) throw_errno(path, "fsync", errno);
}

// Creating and deleting a file proves the directory takes new entries (the lock file may
// have been there already; a read-only mount or a directory of another user does not).
void probe_writable(const fs::path& dir) {
  const fs::path probe = dir / (".write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw DirectoryUnavailable(dir.string(), "probe",
                               "cannot write the checkpoint directory " + dir.string() + ": creating a file there failed: " +
                                   std::strerror(err) + "; set checkpoint.dir to a directory this user can write");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string in_use(const fs::path& dir, const std::string& holder, const std::string& state, const std::string& fix) {
  return "checkpoint directory " + dir.string() + " is in use: " + holder + " " + state + " " +
         (dir / kLockFileName).string() +
         " (two runs saving into one directory would delete each other's saves); " + fix;
}

// Whether the record of `holder` may be taken over by `me`, and what to log; throws otherwise.
std::string judge_record(const fs::path& dir, const LockOwner& holder, const LockOwner& me, bool kernel_locked,
                         bool break_lock) {
  const std::string who = holder.describe();
  if (holder.host == me.host) {
    if (holder.pid == me.pid) return "";
    if (!process_alive(holder.pid)) return "took over the lock left by " + who + ", which is no longer running";
    // The kernel gave us the lock, so that pid does not hold it: the number was reused.
    if (kernel_locked)
      return "took over the lock left by " + who + ", which no longer holds it (pid " + std::to_string(holder.pid) +
             " is another process now)";
    throw DirectoryUnavailable(
        dir.string(), "lock",
        in_use(dir, who, "is running and holds", "wait for it to finish, stop it, or give this run another checkpoint.dir"));
  }
  // Slurm starts a requeued job again only after the earlier run of it has ended.
  if (!holder.slurm_job.empty() && holder.slurm_job == me.slurm_job && holder.slurm_restart < me.slurm_restart)
    return "took over the lock left by " + who + ", an earlier run of this Slurm job (restart " +
           std::to_string(holder.slurm_restart) + "; this is restart " + std::to_string(me.slurm_restart) + ")";
  if (break_lock) return "broke the lock left by " + who + " (--break-lock)";
  throw DirectoryUnavailable(
      dir.string(), "lock",
      in_use(dir, who, "took and has not released",
             "if that run is still going, wait for it or stop it; if it is gone (its node failed), rerun with "
             "--break-lock to take the directory over"));
}

}  // namespace

LockOwner LockOwner::this_process(std::string slurm_job, int64_t slurm_restart) {
  return LockOwner{host_name(), static_cast<int64_t>(::getpid()), std::move(slurm_job), slurm_restart, utc_now()};
}

std::string LockOwner::describe() const {
  std::string s = "pid " + std::to_string(pid) + " on host " + host + " (";
  if (!slurm_job.empty())
    s += "Slurm job " + slurm_job + (slurm_restart > 0 ? " restart " + std::to_string(slurm_restart) : "") + ", ";
  return s + "since " + since + ")";
}

std::string LockOwner::record() const {
  return "host=" + host + "\npid=" + std::to_string(pid) + "\nslurm_job=" + slurm_job +
         "\nslurm_restart=" + std::to_string(slurm_restart) + "\nsince=" + since + "\n";
}

std::optional<LockOwner> LockOwner::parse(const std::string& record) {
  LockOwner owner;
  bool has_host = false, has_pid = false;
  std::istringstream in(record);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    const auto number = [&value](int64_t& out) {
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
      return ec == std::errc() && end == value.data() + value.size();
    };
    if (key == "host") {
      owner.host = value;
      has_host = !value.empty();
    } else if (key == "pid") {
      has_pid = number(owner.pid) && owner.pid > 0;
    } else if (key == "slurm_job") {
      owner.slurm_job = value;
    } else if (key == "slurm_restart") {
      if (!number(owner.slurm_restart)) owner.slurm_restart = 0;
    } else if (key == "since") {
      owner.since = value;
    }
  }
  if (!has_host || !has_pid) return std::nullopt;
  return owner;
}

DirectoryLock DirectoryLock::acquire(const fs::path& dir, const LockOwner& me, bool break_lock) {
  try {
    make_dirs(dir);
  } catch (const CheckpointError& e) {
    throw DirectoryUnavailable(dir.string(), "mkdir",
                               std::string(e.what()) + "; set checkpoint.dir to a directory this user can create");
  }
  const fs::path path = dir / kLockFileName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw DirectoryUnavailable(path.string(), "lock",
                               "cannot write the checkpoint directory " + dir.string() + ": opening " + path.string() +
                                   " failed: " + std::strerror(err) +
                                   "; set checkpoint.dir to a directory this user can write");
  }
  struct CloseUnlessKept {
    int fd;
    bool keep = false;
    ~CloseUnlessKept() {
      if (!keep) ::close(fd);
    }
  } guard{fd};

  struct flock request = {};
  request.l_type = F_WRLCK;
  request.l_whence = SEEK_SET;
  bool kernel_locked = false;
  if (::fcntl(fd, F_SETLK, &request) == 0) {
    kernel_locked = true;
  } else if (errno == EAGAIN || errno == EACCES) {
    const std::optional<LockOwner> holder = LockOwner::parse(read_record(fd));
    throw DirectoryUnavailable(
        path.string(), "lock",
        in_use(dir, holder ? holder->describe() : "another process (its record is unreadable)", "holds",
               "wait for it to finish, stop it, or give this run another checkpoint.dir"));
  } else if (errno != ENOLCK && errno != EOPNOTSUPP && errno != ENOSYS && errno != EINVAL) {
    throw_errno(path, "lock (fcntl F_SETLK)", errno);
  }

  std::string note;
  const std::string text = read_record(fd);
  if (!blank(text)) {
    if (const std::optional<LockOwner> holder = LockOwner::parse(text)) {
      note = judge_record(dir, *holder, me, kernel_locked, break_lock);
    } else if (kernel_locked || break_lock) {
      note = "replaced an unreadable lock record in " + path.string();
    } else {
      throw DirectoryUnavailable(path.string(), "lock",
                                 in_use(dir, "a run with an unreadable record", "holds",
                                        "if no run uses this directory, rerun with --break-lock"));
    }
  }
  write_record(fd, path, me.record());
  probe_writable(dir);
  if (!kernel_locked)
    note += std::string(note.empty() ? "" : "; ") + "the file system of " + dir.string() +
            " refused an fcntl lock, so only the record in " + path.string() +
            " protects the directory (it stops a run started later, not one started at the same instant)";
  guard.keep = true;
  return DirectoryLock(path, fd, kernel_locked, note);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      kernel_locked_(other.kernel_locked_),
      note_(std::move(other.note_)) {}

DirectoryLock::~DirectoryLock() {
  if (fd_ < 0) return;
  // An empty record says "released" to the next run; closing drops the fcntl lock.
  if (::ftruncate(fd_, 0) == 0) ::fsync(fd_);
  ::close(fd_);
}

}  // namespace axonn
