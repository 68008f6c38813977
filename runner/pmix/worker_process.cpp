#include "runner/pmix/worker_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runner/pmix/local_launcher.hpp"

namespace axonn {
namespace {

bool is_executable_file(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// The child between fork and exec may only make async-signal-safe calls: everything it
// needs is prepared before the fork.
struct ChildPlan {
  const char* executable;
  char* const* argv;
  char* const* envp;
  pid_t group;
  pid_t launcher;
  int out_w, err_w;
  const int* reset;
  size_t nreset;
  const char* exec_failed;  // "axonn run: cannot execute <path>: errno "
};

void write_errno(int fd, int err) {  // decimal, without allocating
  char digits[16];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + err % 10);
    err /= 10;
  } while (err > 0 && n < 15);
  char text[18];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  text[n] = '\n';
  [[maybe_unused]] ssize_t w = write(fd, text, static_cast<size_t>(n + 1));
}

[[noreturn]] void run_child(const ChildPlan& p) {
  setpgid(0, p.group);
  // Dies with the launcher's thread; if the launcher is already gone, the prctl came too late.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != p.launcher) _exit(127);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (size_t i = 0; i < p.nreset; ++i) sigaction(p.reset[i], &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, 0);
  dup2(p.out_w, 1);
  dup2(p.err_w, 2);
  execve(p.executable, p.argv, p.envp);
  const int err = errno;
  [[maybe_unused]] ssize_t w = write(2, p.exec_failed, std::strlen(p.exec_failed));
  write_errno(2, err);
  _exit(127);
}

std::vector<char*> c_strings(const std::vector<std::string>& items) {
  std::vector<char*> out;
  for (const auto& s : items) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void close_pair(int fds[2]) {
  close(fds[0]);
  close(fds[1]);
}

}  // namespace

std::string resolve_executable(const std::string& argv0, const std::string& path) {
  if (argv0.empty()) throw LaunchError("the command to run is empty", exit_code::bad_input);
  if (argv0.find('/') != std::string::npos) {
    if (!is_executable_file(argv0))
      throw LaunchError("cannot execute '" + argv0 + "': " + std::strerror(errno), exit_code::bad_input);
    return argv0;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > start ? path.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + argv0;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  throw LaunchError("'" + argv0 + "' was not found on PATH (" + path + "); give its path", exit_code::bad_input);
}

WorkerProcess spawn_worker(const std::string& executable, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, pid_t group, const std::vector<int>& reset) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw LaunchError(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close_pair(out);
    throw LaunchError(std::string("pipe: ") + std::strerror(e));
  }
  const std::vector<char*> args = c_strings(argv);
  const std::vector<char*> envp = c_strings(env);
  const std::string exec_failed = "axonn run: cannot execute " + executable + ": errno ";
  const ChildPlan plan{executable.c_str(), args.data(), envp.data(), group, getpid(), out[1], err[1],
                       reset.data(), reset.size(), exec_failed.c_str()};
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close_pair(out);
    close_pair(err);
    throw LaunchError(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) run_child(plan);
  setpgid(pid, group == 0 ? pid : group);  // here too, so the group exists whichever runs first
  close(out[1]);
  close(err[1]);
  return WorkerProcess{pid, out[0], err[0]};
}

}  // namespace axonn
