#include "pmix/local_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "pmix/pmix_client.hpp"
#include "pmix/pmix_server.hpp"

extern char** environ;

namespace axonn {
namespace {

// Self-pipe: signal handlers and PMIx's progress thread wake the event loop through it.
int g_wake_fd = -1;
std::atomic<int> g_pending_signal{0};

void on_signal(int sig) {
  g_pending_signal.store(sig);
  const char byte = 's';
  [[maybe_unused]] auto n = write(g_wake_fd, &byte, 1);
}

void on_child(int) {
  const char byte = 'c';
  [[maybe_unused]] auto n = write(g_wake_fd, &byte, 1);
}

std::string this_host() {
  char name[HOST_NAME_MAX + 1] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// Splits a pipe's bytes into lines and writes each with the rank's prefix.
struct LineSplitter {
  std::string prefix;
  int out_fd = 1;
  std::string pending;
  void feed(const char* data, size_t n) {
    pending.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(pending.substr(start, nl + 1 - start));
    pending.erase(0, start);
  }
  void flush() {
    if (!pending.empty()) emit(pending + "\n");
    pending.clear();
  }
  void emit(const std::string& line) const {
    const std::string out = prefix + line;
    for (size_t done = 0; done < out.size();) {
      const ssize_t w = write(out_fd, out.data() + done, out.size() - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
  }
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  LineSplitter out, err;
  bool running = true;
};

std::string describe_exit(const RankExit& e) {
  if (e.signal) return "rank " + std::to_string(e.rank) + " was killed by signal " + std::to_string(e.signal) + " (" +
                       strsignal(e.signal) + ")";
  return "rank " + std::to_string(e.rank) + " exited with status " + std::to_string(e.exit_status);
}

[[noreturn]] void exec_child(const LocalJobOptions& opt, const std::vector<std::string>& env, int out_w, int err_w,
                             pid_t launcher) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);  // the launcher died before prctl
  dup2(out_w, 1);
  dup2(err_w, 2);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  std::vector<char*> args, envp;
  for (const auto& a : opt.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  execvpe(args[0], args.data(), envp.data());
  const std::string msg = "axonn run: cannot execute '" + opt.argv[0] + "': " + std::strerror(errno) + "\n";
  [[maybe_unused]] auto n = write(2, msg.data(), msg.size());
  _exit(127);
}

}  // namespace

std::vector<PretendNode> pretend_nodes(int ranks, int nodes, const std::string& host) {
  std::vector<PretendNode> out;
  int next = 0;
  for (int n = 0; n < nodes; ++n) {
    PretendNode node;
    node.hostname = nodes > 1 ? host + "-n" + std::to_string(n) : host;
    const int count = ranks / nodes + (n < ranks % nodes ? 1 : 0);
    for (int i = 0; i < count; ++i) node.ranks.push_back(next++);
    out.push_back(node);
  }
  return out;
}

LocalJobResult run_local_job(const LocalJobOptions& opt) {
  if (opt.ranks < 1) throw std::runtime_error("axonn run: -n must be >= 1 (got " + std::to_string(opt.ranks) + ")");
  if (opt.nodes_sim < 1 || opt.nodes_sim > opt.ranks)
    throw std::runtime_error("axonn run: --nodes-sim must be in [1, " + std::to_string(opt.ranks) + "] (got " +
                             std::to_string(opt.nodes_sim) + ")");
  if (opt.argv.empty()) throw std::runtime_error("axonn run: no command to run");
  const auto start = std::chrono::steady_clock::now();

  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("axonn run: pipe: " + std::string(strerror(errno)));
  g_wake_fd = wake[1];
  std::atomic<int> aborted_rank{-1};
  std::atomic<int> abort_status{0};

  const std::string nspace = "axonn-" + std::to_string(getpid());
  const auto nodes = pretend_nodes(opt.ranks, opt.nodes_sim, opt.hostname.empty() ? this_host() : opt.hostname);
  PmixServer server(nspace, nodes, [&](int rank, int status, const std::string&) {
    int none = -1;
    aborted_rank.compare_exchange_strong(none, rank);
    abort_status.store(status);
    const char byte = 'a';
    [[maybe_unused]] auto n = write(g_wake_fd, &byte, 1);
  });

  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) base_env.emplace_back(*e);
  base_env.insert(base_env.end(), opt.extra_env.begin(), opt.extra_env.end());

  // Block the signals we handle until the handlers are in place; children unblock.
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  struct sigaction old_int, old_term, old_usr1, old_chld;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);
  sa.sa_handler = on_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, &old_chld);

  std::vector<Child> children(static_cast<size_t>(opt.ranks));
  const pid_t launcher = getpid();
  pid_t group = 0;
  for (int r = 0; r < opt.ranks; ++r) {
    Child& c = children[static_cast<size_t>(r)];
    c.rank = r;
    const std::vector<std::string> env = server.client_environment(r, base_env);
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
      throw std::runtime_error("axonn run: pipe: " + std::string(strerror(errno)));
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("axonn run: fork: " + std::string(strerror(errno)));
    if (pid == 0) {
      setpgid(0, group);
      exec_child(opt, env, out[1], err[1], launcher);
    }
    if (group == 0) group = pid;
    setpgid(pid, group);  // both sides, so the group exists whichever runs first
    close(out[1]);
    close(err[1]);
    c.pid = pid;
    c.out_fd = out[0];
    c.err_fd = err[0];
    c.out = {"[" + std::to_string(r) + "] ", 1, ""};
    c.err = {"[" + std::to_string(r) + "] ", 2, ""};
  }
  LocalJobResult result;
  result.connect_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exits.resize(static_cast<size_t>(opt.ranks));

  int running = opt.ranks;
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at{};
  auto stop_all = [&](const std::string& why) {
    if (stopping) return;
    stopping = true;
    result.failure = why;
    kill(-group, SIGTERM);
    kill_at = std::chrono::steady_clock::now() + opt.grace;
  };

  while (running > 0 || std::any_of(children.begin(), children.end(), [](const Child& c) { return c.out_fd >= 0 || c.err_fd >= 0; })) {
    std::vector<pollfd> fds{{wake[0], POLLIN, 0}};
    for (const auto& c : children) {
      if (c.out_fd >= 0) fds.push_back({c.out_fd, POLLIN, 0});
      if (c.err_fd >= 0) fds.push_back({c.err_fd, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), 100);

    char drain[64];
    while (read(wake[0], drain, sizeof drain) > 0) {
    }
    if (const int sig = g_pending_signal.exchange(0)) {
      kill(-group, sig);  // forward; the ranks decide what the signal means
      if (sig != SIGUSR1 && !stopping) {
        stopping = true;
        result.failure = std::string("launcher received ") + strsignal(sig);
        kill_at = std::chrono::steady_clock::now() + opt.grace;
      }
    }
    if (aborted_rank.load() >= 0 && !stopping)
      stop_all("rank " + std::to_string(aborted_rank.load()) + " called PMIx_Abort with status " +
               std::to_string(abort_status.load()));

    for (auto& c : children) {
      for (int* fd : {&c.out_fd, &c.err_fd}) {
        if (*fd < 0) continue;
        pollfd p{*fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0) continue;
        char buf[65536];
        const ssize_t n = read(*fd, buf, sizeof buf);
        LineSplitter& split = fd == &c.out_fd ? c.out : c.err;
        if (n > 0) {
          split.feed(buf, static_cast<size_t>(n));
        } else {
          split.flush();
          close(*fd);
          *fd = -1;
        }
      }
    }

    int status = 0;
    for (pid_t pid; (pid = waitpid(-group, &status, WNOHANG)) > 0;) {
      for (auto& c : children) {
        if (c.pid != pid || !c.running) continue;
        c.running = false;
        --running;
        RankExit& e = result.exits[static_cast<size_t>(c.rank)];
        e.rank = c.rank;
        e.pid = pid;
        if (WIFEXITED(status)) e.exit_status = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
        const bool failed = e.signal != 0 || e.exit_status != 0;
        if (failed && !stopping) stop_all(describe_exit(e));
      }
    }
    if (stopping && running > 0 && std::chrono::steady_clock::now() >= kill_at) kill(-group, SIGKILL);
  }

  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  close(wake[0]);
  close(wake[1]);
  g_wake_fd = -1;

  if (!result.failure.empty()) {
    const RankExit* first = nullptr;
    for (const auto& e : result.exits)
      if ((e.signal || e.exit_status) && result.failure.find("rank " + std::to_string(e.rank) + " ") == 0) first = &e;
    result.exit_code = first && first->exit_status > 0 ? first->exit_status : 1;
  }
  return result;
}

}  // namespace axonn
