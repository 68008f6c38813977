#include "runner/pmix/local_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/wall_clock.hpp"
#include "runner/pmix/labelled_output.hpp"
#include "runner/pmix/pmix_server.hpp"
#include "runner/pmix/worker_process.hpp"

extern char** environ;

namespace axonn {
namespace {

using Clock = std::chrono::steady_clock;

// Self-pipe: the signal handler and PMIx's progress thread wake the launcher's loop by
// writing one byte, a signal number or one of these events.
int g_wake_fd = -1;
constexpr unsigned char kRankConnected = 100;
constexpr unsigned char kRankAborted = 101;
const std::vector<int> kHandledSignals = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGCHLD};

void wake(unsigned char what) {
  const int saved = errno;
  [[maybe_unused]] ssize_t n = write(g_wake_fd, &what, 1);
  errno = saved;
}

void on_signal(int sig) { wake(static_cast<unsigned char>(sig)); }

// A stop signal repeated within this window of the first is the same request; a person who
// means "stop now" sends the second one after seeing the first did not stop the job.
constexpr std::chrono::milliseconds kRepeatWindow{1000};

// Installs on_signal for kHandledSignals and restores the previous handlers on exit.
class SignalHandlers {
 public:
  SignalHandlers() : old_(kHandledSignals.size()) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;  // SIGCHLD on a rank's stop too: reap() notes it
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kHandledSignals.size(); ++i) sigaction(kHandledSignals[i], &sa, &old_[i]);
  }
  ~SignalHandlers() {
    for (size_t i = 0; i < kHandledSignals.size(); ++i) sigaction(kHandledSignals[i], &old_[i], nullptr);
  }
  SignalHandlers(const SignalHandlers&) = delete;
  SignalHandlers& operator=(const SignalHandlers&) = delete;

 private:
  std::vector<struct sigaction> old_;
};

// Blocks kHandledSignals in this thread while it forks (see spawn_worker).
class BlockedSignals {
 public:
  BlockedSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : kHandledSignals) sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;

 private:
  sigset_t old_;
};

// "SIGTERM", "Terminated"
std::string signal_abbrev(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}
std::string signal_text(int sig) {
  const char* text = strsignal(sig);
  return text ? text : "unknown signal";
}

// KEY=VALUE list with `extra` replacing or adding entries of `base`.
std::vector<std::string> merged_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  for (const auto& kv : extra) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw LaunchError("extra environment entry '" + kv + "' is not KEY=VALUE", exit_code::bad_input);
    const std::string key = kv.substr(0, eq + 1);
    std::erase_if(env, [&](const std::string& e) { return e.rfind(key, 0) == 0; });
    env.push_back(kv);
  }
  return env;
}

std::string path_of(const std::vector<std::string>& env) {
  for (const auto& e : env)
    if (e.rfind("PATH=", 0) == 0) return e.substr(5);
  return "/usr/local/bin:/usr/bin:/bin";
}

void validate(const LocalJobOptions& opt) {
  if (opt.ranks < 1)
    throw LaunchError("-n must be at least 1 (got " + std::to_string(opt.ranks) + ")", exit_code::bad_input);
  if (opt.nodes_sim < 1 || opt.nodes_sim > opt.ranks)
    throw LaunchError("--nodes-sim must be between 1 and the " + std::to_string(opt.ranks) + " ranks (got " +
                          std::to_string(opt.nodes_sim) + ")",
                      exit_code::bad_input);
  if (opt.argv.empty()) throw LaunchError("no command to run", exit_code::bad_input);
  if (opt.grace.count() < 0) throw LaunchError("the grace period must not be negative", exit_code::bad_input);
}

struct Rank {
  WorkerProcess process;
  std::optional<LabelledOutput> out, err;  // absent without labels: bytes pass through
  bool running = false;
  bool sent_kill = false;  // the launcher sent it SIGKILL
  int stopped_by = 0;      // the signal that stopped it (SIGSTOP, SIGTSTP, ...) while it is stopped, else 0
};

class LocalJob {
 public:
  explicit LocalJob(const LocalJobOptions& options) : opt_(options), start_(Clock::now()) {}
  ~LocalJob();
  LocalJobResult run();

 private:
  void spawn_all(PmixJob& pmix, const std::string& executable, const std::vector<std::string>& env);
  void loop();
  void handle_wake_bytes();
  // fds[i + 1] is *streams[i].second of rank *streams[i].first.
  void read_streams(const std::vector<pollfd>& fds, const std::vector<std::pair<Rank*, int*>>& streams);
  void read_stream(Rank& r, int* fd);
  // What an exited rank left in its pipes, before the launcher acts on its exit: its last
  // lines (its error) come before anything the others print once they are stopped.
  void drain(Rank& r);
  void close_stream(Rank& r, int* fd);
  void kill_stopped_ranks();
  void settle_exit_code();
  void reap();
  void fail(const std::string& why, int exit_code, int stop_signal = SIGTERM);
  void signal_group(int sig);
  int poll_timeout_ms() const;

  const LocalJobOptions& opt_;
  const Clock::time_point start_;
  int wake_[2] = {-1, -1};
  pid_t group_ = 0;
  std::vector<Rank> ranks_;
  int running_ = 0;
  LocalJobResult result_;

  std::mutex events_mu_;  // written on PMIx's progress thread
  std::vector<bool> connected_;
  int connected_count_ = 0;
  std::optional<std::string> abort_message_;
  int abort_status_ = 0;

  bool stopping_ = false;
  bool killed_ = false;
  // The SIGINT or SIGTERM that stopped the job, and when it arrived: the same signal again
  // within kRepeatWindow is the same request (see handle_wake_bytes).
  int stop_signal_ = 0;
  Clock::time_point stop_signal_at_;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> drain_until_;
  double ended_unix_s_ = 0;
};

LocalJob::~LocalJob() {
  if (group_ > 0 && running_ > 0) {  // an exception left ranks behind
    kill(-group_, SIGKILL);
    for (auto& r : ranks_)
      if (r.running) waitpid(r.process.pid, nullptr, 0);
  }
  for (auto& r : ranks_)
    for (int fd : {r.process.stdout_fd, r.process.stderr_fd})
      if (fd >= 0) close(fd);
  for (int fd : wake_)
    if (fd >= 0) close(fd);
  g_wake_fd = -1;
}

LocalJobResult LocalJob::run() {
  validate(opt_);
  const auto nodes = pretend_nodes(opt_.ranks, opt_.nodes_sim, opt_.hostname.empty() ? this_hostname() : opt_.hostname);
  const std::vector<std::string> env = merged_environment(opt_.extra_env);
  const std::string executable = resolve_executable(opt_.argv[0], path_of(env));
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw LaunchError(std::string("pipe: ") + std::strerror(errno));
  g_wake_fd = wake_[1];
  connected_.assign(static_cast<size_t>(opt_.ranks), false);
  result_.exits.resize(static_cast<size_t>(opt_.ranks));

  static std::atomic<int> job_counter{0};
  const std::string nspace = "axonn.run." + std::to_string(getpid()) + "." + std::to_string(job_counter++);
  PmixJobEvents events;
  events.connected = [this](int rank) {
    std::lock_guard lock(events_mu_);
    if (rank < 0 || rank >= opt_.ranks || connected_[static_cast<size_t>(rank)]) return;
    connected_[static_cast<size_t>(rank)] = true;
    ++connected_count_;
    wake(kRankConnected);
  };
  events.aborted = [this](int rank, int status, const std::string& message) {
    std::lock_guard lock(events_mu_);
    if (abort_message_) return;
    abort_message_ = "rank " + std::to_string(rank) + " called PMIx_Abort with status " + std::to_string(status) +
                     (message.empty() ? "" : ": " + message);
    abort_status_ = status;
    wake(kRankAborted);
  };
  PmixJob pmix(nspace, nodes, std::move(events));
  const SignalHandlers handlers;
  spawn_all(pmix, executable, env);
  loop();
  settle_exit_code();
  result_.wall_s = std::chrono::duration<double>(Clock::now() - start_).count();
  result_.ended_unix_s = ended_unix_s_;
  return result_;
}

void LocalJob::spawn_all(PmixJob& pmix, const std::string& executable, const std::vector<std::string>& env) {
  ranks_.resize(static_cast<size_t>(opt_.ranks));
  for (int r = 0; r < opt_.ranks; ++r) {
    const std::vector<std::string> rank_env = pmix.client_environment(r, env);
    Rank& rank = ranks_[static_cast<size_t>(r)];
    {
      const BlockedSignals blocked;
      rank.process = spawn_worker(executable, opt_.argv, rank_env, group_, kHandledSignals);
    }
    rank.running = true;
    ++running_;
    if (group_ == 0) group_ = rank.process.pid;
    if (opt_.label) {
      rank.out.emplace(r, opt_.stdout_fd);
      rank.err.emplace(r, opt_.stderr_fd);
    }
    RankExit& e = result_.exits[static_cast<size_t>(r)];
    e.rank = r;
    e.pid = rank.process.pid;
  }
  spdlog::debug("axonn run: {} ranks started in {:.1f} ms (namespace {}, process group {})", opt_.ranks,
                std::chrono::duration<double, std::milli>(Clock::now() - start_).count(), pmix.nspace(), group_);
}

void LocalJob::loop() {
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<std::pair<Rank*, int*>> streams;
    for (auto& r : ranks_)
      for (int* fd : {&r.process.stdout_fd, &r.process.stderr_fd})
        if (*fd >= 0) {
          fds.push_back({*fd, POLLIN, 0});
          streams.emplace_back(&r, fd);
        }
    if (running_ == 0) {
      if (fds.size() == 1) return;
      if (!drain_until_) {
        // Every rank exited: whatever they left running in the job's process group goes
        // too, like the end of a Slurm step; then the pipes close and the loop ends.
        signal_group(SIGKILL);
        drain_until_ = Clock::now() + std::chrono::seconds(1);
      } else if (Clock::now() >= *drain_until_) {  // held open by a process outside the group
        for (auto& r : ranks_) {
          close_stream(r, &r.process.stdout_fd);
          close_stream(r, &r.process.stderr_fd);
        }
        return;
      }
    }
    const int ready = poll(fds.data(), fds.size(), poll_timeout_ms());
    if (ready < 0 && errno != EINTR) throw LaunchError(std::string("poll: ") + std::strerror(errno));
    handle_wake_bytes();
    if (ready > 0) read_streams(fds, streams);
    reap();
    if (kill_at_ && !killed_ && running_ > 0 && Clock::now() >= *kill_at_) {
      spdlog::debug("axonn run: grace period over, killing the remaining {} ranks", running_);
      signal_group(SIGKILL);
      killed_ = true;
    }
  }
}

int LocalJob::poll_timeout_ms() const {
  auto until = Clock::now() + std::chrono::milliseconds(200);  // reap even if a SIGCHLD was lost
  if (kill_at_ && !killed_) until = std::min(until, *kill_at_);
  if (drain_until_) until = std::min(until, *drain_until_);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, ms) + 1);
}

void LocalJob::handle_wake_bytes() {
  unsigned char bytes[256];
  for (ssize_t n; (n = read(wake_[0], bytes, sizeof bytes)) > 0;) {
    for (ssize_t i = 0; i < n; ++i) {
      const int what = bytes[i];
      if (what == SIGCHLD) continue;  // reap() runs after every wake-up
      if (what == SIGINT || what == SIGTERM) result_.interrupted = true;
      if (what == kRankConnected) {
        std::lock_guard lock(events_mu_);
        if (connected_count_ == opt_.ranks && result_.connected_s < 0) {
          result_.connected_s = std::chrono::duration<double>(Clock::now() - start_).count();
          spdlog::debug("axonn run: all {} ranks connected to the PMIx server {:.1f} ms after start", opt_.ranks,
                        result_.connected_s * 1e3);
        }
      } else if (what == kRankAborted) {
        std::string message;
        int status = 0;
        {
          std::lock_guard lock(events_mu_);
          message = *abort_message_;
          status = abort_status_;
        }
        fail(message, status != 0 ? status : 1);
      } else if (what == SIGUSR1 || what == SIGUSR2 || what == SIGHUP) {  // preemption notices: forwarded only
        signal_group(what);
      } else if (!stopping_) {  // SIGINT, SIGTERM: forwarded; the ranks get the grace period
        fail("the launcher received " + signal_abbrev(what) + " (" + signal_text(what) + ") and forwarded it",
             128 + what, what);
        stop_signal_ = what;
        stop_signal_at_ = Clock::now();
      } else if (what == stop_signal_ && Clock::now() - stop_signal_at_ < kRepeatWindow) {
        // One event often delivers the signal twice: `timeout` signals its child and then its
        // own process group, a shell's Ctrl-C reaches a whole foreground group, and Slurm
        // signals the step's processes and the batch script's. One request, not two.
        spdlog::debug("axonn run: {} again within {} ms, the same request", signal_abbrev(what),
                      std::chrono::duration_cast<std::chrono::milliseconds>(kRepeatWindow).count());
      } else if (!killed_) {  // a second request, or one after a failure: no more waiting
        spdlog::debug("axonn run: {} while stopping, killing the remaining {} ranks", signal_abbrev(what), running_);
        signal_group(SIGKILL);
        killed_ = true;
      }
    }
  }
}

void LocalJob::read_streams(const std::vector<pollfd>& fds, const std::vector<std::pair<Rank*, int*>>& streams) {
  for (size_t i = 0; i < streams.size(); ++i) {
    if (fds[i + 1].revents == 0) continue;
    auto [r, fd] = streams[i];
    read_stream(*r, fd);
  }
}

void LocalJob::read_stream(Rank& r, int* fd) {
  char buf[65536];
  const ssize_t n = read(*fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    close_stream(r, fd);
    return;
  }
  const bool is_out = fd == &r.process.stdout_fd;
  std::optional<LabelledOutput>& labelled = is_out ? r.out : r.err;
  if (labelled)
    labelled->feed(buf, static_cast<size_t>(n));
  else
    write_all(is_out ? opt_.stdout_fd : opt_.stderr_fd, std::string(buf, static_cast<size_t>(n)));
}

void LocalJob::drain(Rank& r) {
  // Without blocking: a process the rank left behind may hold its pipes open.
  for (int* fd : {&r.process.stderr_fd, &r.process.stdout_fd}) {
    for (int reads = 0; *fd >= 0 && reads < 64; ++reads) {
      pollfd p{*fd, POLLIN, 0};
      if (poll(&p, 1, 0) <= 0 || p.revents == 0) break;
      read_stream(r, fd);
    }
  }
}

void LocalJob::close_stream(Rank& r, int* fd) {
  if (*fd < 0) return;
  std::optional<LabelledOutput>& labelled = fd == &r.process.stdout_fd ? r.out : r.err;
  if (labelled) labelled->finish();  // a partial last line
  close(*fd);
  *fd = -1;
}

void LocalJob::reap() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    int status = 0;
    if (!r.running || waitpid(r.process.pid, &status, WNOHANG | WUNTRACED | WCONTINUED) != r.process.pid) continue;
    if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
      r.stopped_by = WIFSTOPPED(status) ? WSTOPSIG(status) : 0;
      spdlog::debug("axonn run: rank {} (pid {}) {}", i, r.process.pid,
                    r.stopped_by ? "was stopped by " + signal_abbrev(r.stopped_by) : std::string("continues"));
      // A job already stopping cannot wait for a stopped rank to act on SIGTERM.
      if (stopping_) kill_stopped_ranks();
      continue;
    }
    r.running = false;
    r.stopped_by = 0;
    if (--running_ == 0) ended_unix_s_ = unix_seconds_now();
    RankExit& e = result_.exits[i];
    e.killed_by_launcher = r.sent_kill;
    if (WIFEXITED(status)) e.exit_status = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    {
      std::lock_guard lock(events_mu_);
      e.connected = connected_[i];
    }
    spdlog::debug("axonn run: {} (pid {})", describe_exit(e), e.pid);
    if (e.signal != 0 || e.exit_status > 0) drain(r);
    if (e.signal != 0) fail(describe_exit(e), 128 + e.signal);
    // A rank that saved and stopped: the others are stopping too (the trainer's ranks agree
    // on it), so they get the grace period to exit by themselves, then SIGKILL.
    if (e.exit_status == EX_TEMPFAIL) fail(describe_exit(e), e.exit_status, 0);
    if (e.exit_status > 0) fail(describe_exit(e), e.exit_status);
  }
}

// The first failure names the job's result; the others are its consequences. stop_signal 0:
// the others are not signalled, only killed once the grace period is over.
void LocalJob::fail(const std::string& why, int exit_code, int stop_signal) {
  if (stopping_) return;
  stopping_ = true;
  result_.failure = why;
  result_.exit_code = exit_code;
  result_.failed_unix_s = unix_seconds_now();
  spdlog::debug("axonn run: {}; stopping the job", why);
  if (running_ > 0 && stop_signal != 0) signal_group(stop_signal);
  kill_stopped_ranks();
  kill_at_ = Clock::now() + opt_.grace;
}

// A stopped rank cannot act on SIGTERM and holds its peers in their collectives until the
// grace period ends: it goes at once. The result says so, since its stop is often the cause.
void LocalJob::kill_stopped_ranks() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (!r.running || r.stopped_by == 0) continue;
    result_.failure += "; rank " + std::to_string(i) + " (pid " + std::to_string(r.process.pid) + ") was stopped by " +
                       signal_abbrev(r.stopped_by) + " and is killed";
    kill(r.process.pid, SIGKILL);
    r.sent_kill = true;
    r.stopped_by = 0;
  }
}

// Every rank saved its state and exited with EX_TEMPFAIL (75): the job stopped as asked,
// whether the signal reached the launcher (forwarded SIGTERM/SIGINT) or the ranks directly,
// and a wrapper must see 75 (requeue) as it would under srun.
void LocalJob::settle_exit_code() {
  const bool all_preempted = std::all_of(result_.exits.begin(), result_.exits.end(), [](const RankExit& e) {
    return e.signal == 0 && e.exit_status == EX_TEMPFAIL;
  });
  if (!all_preempted || result_.exits.empty()) return;
  result_.exit_code = EX_TEMPFAIL;
  result_.failure.clear();
}

void LocalJob::signal_group(int sig) {
  if (group_ <= 0) return;
  kill(-group_, sig);  // never kill(0): that is the launcher's own group
  if (sig == SIGKILL)
    for (auto& r : ranks_) r.sent_kill = r.sent_kill || r.running;
}

}  // namespace

std::string describe_exit(const RankExit& e) {
  if (e.signal != 0)
    return "rank " + std::to_string(e.rank) + " was killed by signal " + std::to_string(e.signal) + " (" +
           signal_abbrev(e.signal) + ", " + signal_text(e.signal) + ")";
  return "rank " + std::to_string(e.rank) + " exited with status " + std::to_string(e.exit_status);
}

LocalJobResult run_local_job(const LocalJobOptions& options) { return LocalJob(options).run(); }

}  // namespace axonn
