// `axonn run`: the local launcher as users see it, with `axonn selftest` as the worker:
// topology values, every collective on every axis of several layouts, labelled output,
// failure handling, signal forwarding, no orphans; and the same worker under mpirun.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/cuda_device.hpp"
#include "process_helpers.hpp"

namespace axonn::test {
namespace {

std::string host() {
  char name[HOST_NAME_MAX + 1] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

TEST(LocalLauncher, FourRanksOnOneNode) {
  const auto r = run_command(kAxonn + " run -n 4 selftest");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_TRUE(contains(r.output, "[" + n + "] selftest: rank " + n + "/4 node 0/1 (" + host() + ") local " + n +
                                       "/4 peers 0,1,2,3 layout 4x1x1x1"))
        << r.output;
  }
  EXPECT_TRUE(contains(r.output, "[0] selftest: 196 passed, 0 failed")) << r.output;
}

TEST(LocalLauncher, EightRanksOnTwoPretendNodesOverSeveralLayouts) {
  for (const char* layout : {"2x2x1x2", "1x2x2x2", "2x1x2x2:yxzd", "1x1x1x8", "8x1x1x1:dxyz", "1x2x4x1"}) {
    const auto r =
        run_command("AXONN_LAYOUT=" + std::string(layout) + " " + kAxonn + " run -n 8 --nodes-sim 2 selftest");
    ASSERT_EQ(r.code, 0) << layout << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "[0] selftest: 392 passed, 0 failed")) << layout << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "[5] selftest: rank 5/8 node 1/2 (" + host() + "-n1) local 1/4 peers 4,5,6,7"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "[2] selftest: rank 2/8 node 0/2 (" + host() + "-n0) local 2/4 peers 0,1,2,3"))
        << r.output;
  }
}

TEST(LocalLauncher, SingleRank) {
  const auto r = run_command(kAxonn + " run -n 1 selftest");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[0] selftest: 49 passed, 0 failed")) << r.output;
}

TEST(LocalLauncher, RankKilledMidCollectiveStopsTheJobAndIsNamed) {
  const auto r = run_command(kAxonn + " run -n 4 selftest --layout 1x2x2x1 --kill-rank 2 --timeout-ms 20000");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: rank 2 was killed by signal 9")) << r.output;
  EXPECT_FALSE(contains(r.output, "timed out after 20000 ms"))
      << "the launcher waited for the collective timeout instead of acting on the death\n"
      << r.output;
  EXPECT_EQ(run_command("pgrep -f \"[s]elftest --layout 1x2x2x1 --kill-rank\"").output, "");
}

TEST(LocalLauncher, StalledRankTimesOutNamingAxisCollectiveAndRanks) {
  const auto r =
      run_command(kAxonn + " run -n 4 --grace-ms 500 selftest --layout 1x2x2x1 --stall-rank 3 --timeout-ms 1500");
  // The status of the rank that gave up first: the launcher ended the job, stopping rank 3
  // (which sleeps until stopped), not run_command's time limit (124).
  EXPECT_EQ(r.code, 1) << r.output;
  // Whichever rank gives up first, its line names rank 3, its host, and what it is doing
  // (sleeping outside the collectives), and so do the lines of the others.
  const size_t first = r.output.find("] axonn selftest: ");
  ASSERT_NE(first, std::string::npos) << r.output;
  const std::string line = r.output.substr(first, r.output.find('\n', first) - first);
  EXPECT_TRUE(contains(line, "all_reduce on axis '")) << line;
  EXPECT_TRUE(contains(line, "timed out after 1500 ms: ")) << line;
  EXPECT_TRUE(contains(line, "world rank 3 on host " + host() + " (pid ")) << line;
  EXPECT_TRUE(contains(line, ") did not arrive: it runs but is in no collective (for ")) << line;
  EXPECT_EQ(run_command("pgrep -f \"[s]elftest --layout 1x2x2x1 --stall-rank\"").output, "");
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The pid of rank `rank` among the children of `launcher` (its ranks), or -1.
pid_t rank_pid(pid_t launcher, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string text = read_file(entry.path() / "stat");
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 2));
    std::string state;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent != launcher) continue;
    const std::string env = read_file(entry.path() / "environ");
    const std::string entry_text = "PMIX_RANK=" + std::to_string(rank) + '\0';  // environ: NUL-separated
    if (env.rfind(entry_text, 0) == 0 || env.find('\0' + entry_text) != std::string::npos) return std::stoi(name);
  }
  return -1;
}

// A rank stopped with SIGSTOP in the middle of training: the others time out, and the first
// failure line names the stopped rank, its host, its pid and the axis, every time (5 runs,
// each stopping another rank of a 1x2x2x1 layout, so the rank that gives up first is
// sometimes a direct peer of the stopped one and sometimes only waits on such a peer); the
// launcher then kills the stopped rank at once, and says so.
TEST(LocalLauncher, AStoppedRankIsNamedByTheFirstFailureLineEveryTime) {
  const std::string dir = kBinaryDir + "/launcher-sigstop-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  constexpr int kTimeoutMs = 2000;
  int run = 0;
  for (const int victim : {3, 1, 2, 0, 3}) {
    const std::string log = dir + "/run-" + std::to_string(run++) + "-rank-" + std::to_string(victim) + ".log";
    const pid_t launcher = fork();
    if (launcher == 0) {
      if (chdir(dir.c_str()) != 0) _exit(127);
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      const std::string job = kSourceDir + "/job_templates/tiny.toml";
      const std::string timeout = "--timeout-ms=" + std::to_string(kTimeoutMs);
      execl(kAxonn.c_str(), "axonn", "run", "-n", "4", job.c_str(), "--layout", "1x2x2x1", timeout.c_str(),
            "training.steps=100000", "checkpoint.interval=0", "run.log_interval=1", nullptr);
      _exit(127);
    }
    // Three steps logged: training runs, every collective of a step has been used.
    auto steps = [&] {
      std::ifstream in(log);
      int n = 0;
      for (std::string l; std::getline(in, l);) n += contains(l, "[0] [info] step ") ? 1 : 0;
      return n;
    };
    for (int i = 0; i < 1200 && steps() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const pid_t stopped = rank_pid(launcher, victim);
    if (steps() < 3 || stopped <= 0) {
      kill(launcher, SIGKILL);
      waitpid(launcher, nullptr, 0);
      FAIL() << "rank " << victim << " (pid " << stopped << ") did not start training\n"
             << run_command("cat " + log).output;
    }
    kill(stopped, SIGSTOP);
    int status = 0;
    waitpid(launcher, &status, 0);
    const std::string out = run_command("cat " + log).output;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << out;
    const size_t at = out.find("] axonn train: ");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string first = out.substr(at, out.find('\n', at) - at);
    EXPECT_TRUE(contains(first, " on axis '")) << "rank " << victim << " stopped; first failure line:\n" << first;
    EXPECT_TRUE(contains(first, "world rank " + std::to_string(victim) + " on host " + host() + " (pid " +
                                    std::to_string(stopped) +
                                    ") did not arrive: it does not answer (stopped, or hung)"))
        << "rank " << victim << " stopped; first failure line:\n"
        << first << "\n"
        << out;
    EXPECT_TRUE(contains(out, "rank " + std::to_string(victim) + " (pid " + std::to_string(stopped) +
                                  ") was stopped by SIGSTOP and is killed"))
        << out;
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

TEST(LocalLauncher, FailingRankExitStatusIsReportedAndOthersStopped) {
  const auto r = run_command(kAxonn + " run -n 3 -- sh -c \"if [ \\$PMIX_RANK = 1 ]; then exit 3; fi; " +
                             "sleep 41.5; echo slept 41.5 s\"");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: rank 1 exited with status 3")) << r.output;
  EXPECT_FALSE(contains(r.output, "slept 41.5 s")) << "the others sleep 41.5 s unless stopped\n" << r.output;
  EXPECT_EQ(run_command("pgrep -f \"[s]leep 41.5\"").output, "");
}

// `axonn run OPTIONS -- sh -c 'SCRIPT'` started as a child of this test, exec'd so that the
// child is the launcher itself (a kill of its pid or a pkill of its command line reaches the
// launcher, not a shell that SIGTERM ends at once), its output in `log`. The log is removed
// first: a previous run's "ready" lines would pass for this one's until the shell truncates it.
pid_t start_shell_ranks(const std::string& log, const std::string& options, const std::string& script) {
  std::filesystem::remove(log);
  const pid_t launcher = fork();
  if (launcher == 0) {
    const std::string cmd = "exec " + kAxonn + " run " + options + " -- sh -c '" + script + "' > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  return launcher;
}

// Waits until `log` holds a "ready" line of each of `ranks` ranks (up to 30 s: a loaded
// machine starts them slowly, and a TERM before a shell's trap kills it without its line),
// then lets the shells reach their `wait`. False when not every rank said so.
bool ranks_ready(const std::string& log, int ranks) {
  const std::string count = std::to_string(ranks) + "\n";
  for (int i = 0; i < 600 && run_command("grep -c ready " + log).output != count; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (run_command("grep -c ready " + log).output != count) return false;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return true;
}

TEST(LocalLauncher, SigtermIsForwardedToEveryRank) {
  const std::string log = std::string(AXONN_BINARY_DIR) + "/launcher_sigterm.log";
  const pid_t launcher =
      start_shell_ranks(log, "-n 2", "trap \"echo got TERM; exit 0\" TERM; echo ready; sleep 42.5 & wait");
  // Once both ranks have set their trap, signal the launcher (found by name; the pattern's
  // brackets keep pkill's own shell from matching).
  if (!ranks_ready(log, 2)) {
    run_command("pkill -KILL -f \"bin/axon[n] run -n 2 -- sh -c\"; pkill -f \"[s]leep 42.5\"");
    waitpid(launcher, nullptr, 0);
    FAIL() << "the ranks did not both say ready:\n" << run_command("cat " + log).output;
  }
  ASSERT_EQ(run_command("pkill -TERM -f \"bin/axon[n] run -n 2 -- sh -c\"").code, 0);
  int status = 0;
  waitpid(launcher, &status, 0);
  const std::string out = run_command("cat " + log).output;
  // The ranks' trap exits: they ended on the forwarded SIGTERM, not after their 42.5 s sleep.
  EXPECT_TRUE(contains(out, "[0] got TERM")) << out;
  EXPECT_TRUE(contains(out, "[1] got TERM")) << out;
  run_command("pkill -f \"[s]leep 42.5\"");  // the shells' background sleeps
}

TEST(LocalLauncher, RanksDieWithAKilledLauncher) {
  const pid_t launcher = fork();
  if (launcher == 0) {
    execl(kAxonn.c_str(), "axonn", "run", "-n", "2", "--", "sleep", "43.5", nullptr);
    _exit(127);
  }
  for (int i = 0; i < 100 && run_command("pgrep -c -f \"^sleep 43.5\"").output != "2\n"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(run_command("pgrep -c -f \"^sleep 43.5\"").output, "2\n");
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  std::string left;
  for (int i = 0; i < 40; ++i) {
    left = run_command("pgrep -f \"^sleep 43.5\"").output;
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(left, "") << "orphaned ranks";
}

// A stopped launch costs nothing to undo: every input is checked before the first rank
// starts, so none of these prints a rank's "[N] " line.
TEST(LocalLauncher, BadInputIsRefusedBeforeAnyRankStarts) {
  const std::string tiny = kSourceDir + "/job_templates/tiny.toml";
  struct Case {
    std::string command, says;
  };
  const std::vector<Case> cases = {
      {kAxonn + " run -n 4 " + kSourceDir + "/README.md",
       "is neither a job TOML (a .toml file) nor an axonn command (train, selftest, ...); to run another program on "
       "every rank: axonn run -n 4 -- "},
      {kAxonn + " run -n 2 " + kBinaryDir + "/no-such-job.toml", "no-such-job.toml: cannot read"},
      {kAxonn + " run -n 2 train " + kBinaryDir + "/no-such-job.toml", "no-such-job.toml: cannot read"},
      {kAxonn + " run -n 2 " + tiny + " training.stepz=3", "training.stepz"},
      {kAxonn + " run -n 2 " + tiny + " --no-such-option", "unknown option '--no-such-option'"},
      {kAxonn + " run -n 2 " + tiny + " --site " + kBinaryDir + "/no-such-site.toml", "no-such-site.toml: cannot read"},
      {kAxonn + " run -n 2 " + tiny + " data.path=no-such-data.bin", "no-such-data.bin cannot be read"},
      {"AXONN_LAYOUT=3x1x1x1 " + kAxonn + " run -n 4 " + tiny,
       "layout 3x1x1x1 (AXONN_LAYOUT) has 3 ranks but the job has 4"},
      {kAxonn + " run -n 3 " + tiny + " --layout 1x3x1x1", "is not divisible by G_x*G_z=3"},
      {kAxonn + " run -n 2 -- axonn-no-such-program", "'axonn-no-such-program' was not found on PATH"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(c.command);
    EXPECT_EQ(r.code, 2) << c.command << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.says)) << c.command << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "[0] ")) << "a rank started: " << c.command << "\n" << r.output;
  }
}

// `axonn train` reads the job before it looks for PMIx: a missing job is bad input (2), with
// or without a launcher.
TEST(LocalLauncher, TrainReadsTheJobBeforePmix) {
  const auto r = run_command("env -u PMIX_NAMESPACE " + kAxonn + " train " + kBinaryDir + "/no-such-job.toml");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn train: " + kBinaryDir + "/no-such-job.toml: cannot read")) << r.output;
}

// A rank count the machine cannot hold stops at once, naming the limit: here the open-file
// limit, which `ulimit -n` sets for this test whatever the machine (the launcher holds 3
// files per rank; 40 ranks need 184 with its reserve).
TEST(LocalLauncher, RankCountTheMachineCannotHoldIsRefusedSayingWhy) {
  const auto r = run_command("ulimit -n 100 && " + kAxonn + " run -n 40 selftest");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "axonn run: -n 40: this machine cannot hold 40 ranks: the launcher holds 3 files per "
                       "rank open (its stdout and stderr pipes, the PMIx server's connection), 184 in all, "
                       "and the open-file limit is 100 (RLIMIT_NOFILE hard limit, ulimit -Hn)"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "[0] ")) << r.output;
}

// SIGTERM to the launcher is forwarded; when every rank then saves and exits 75, so does the
// launcher (as srun would): a wrapper requeues instead of seeing 143.
TEST(LocalLauncher, SigtermEndsWithSeventyFiveWhenEveryRankExitsSeventyFive) {
  const std::string log = kBinaryDir + "/launcher_sigterm75.log";
  const pid_t launcher =
      start_shell_ranks(log, "-n 3", "trap \"echo saved; exit 75\" TERM; echo ready; sleep 44.5 & wait");
  ASSERT_TRUE(ranks_ready(log, 3)) << run_command("cat " + log).output;
  ASSERT_EQ(run_command("pkill -TERM -f \"bin/axon[n] run -n 3 -- sh -c\"").code, 0);
  int status = 0;
  waitpid(launcher, &status, 0);
  const std::string out = run_command("cat " + log).output;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 75) << out;
  EXPECT_EQ(run_command("grep -c saved " + log).output, "3\n") << out;
  EXPECT_TRUE(contains(out, "axonn run: every rank exited with 75: stopped after a committed checkpoint")) << out;
  run_command("pkill -f \"[s]leep 44.5\"");  // the shells' background sleeps
}

// One stop request delivered twice, as `timeout` does (SIGTERM to its child, then to its own
// process group, which holds the launcher): one request. The ranks take 0.5 s to save, and
// the launcher still ends with 75, every rank having saved. A second SIGTERM two seconds
// later is a second request, which kills the ranks still saving at once, long before the
// grace period (30 s) is over: 143, none saved.
TEST(LocalLauncher, ASignalDeliveredTwiceByOneEventIsOneRequestAndALaterOneForces) {
  struct Case {
    const char* name;
    const char* second_after;  // seconds between the two SIGTERMs (sleep(1)'s argument)
    const char* save_seconds;  // how long each rank takes to save on SIGTERM
    int code;
    const char* saved;
  };
  for (const Case& c :
       {Case{"twice-at-once", "0", "0.5", 75, "3\n"}, Case{"twice-two-seconds-apart", "2", "20", 143, "0\n"}}) {
    const std::string log = kBinaryDir + "/launcher_" + c.name + ".log";
    const pid_t launcher =
        start_shell_ranks(log, "-n 3 --grace-ms 30000",
                          "trap \"sleep " + std::string(c.save_seconds) + "; echo saved; exit 75\" TERM; echo ready; " +
                              "sleep 45.5 & wait");
    ASSERT_TRUE(ranks_ready(log, 3)) << run_command("cat " + log).output;
    const std::string pid = std::to_string(launcher);
    ASSERT_EQ(run_command(std::string("kill -TERM ") + pid + "; sleep " + c.second_after + "; kill -TERM " + pid).code, 0);
    int status = 0;
    waitpid(launcher, &status, 0);
    const std::string out = run_command("cat " + log).output;
    ASSERT_TRUE(WIFEXITED(status)) << c.name << "\n" << out;
    EXPECT_EQ(WEXITSTATUS(status), c.code) << c.name << "\n" << out;
    EXPECT_EQ(run_command("grep -c saved " + log).output, c.saved) << c.name << "\n" << out;
    run_command("pkill -f \"[s]leep 45.5\"");  // the shells' background sleeps
  }
}

TEST(LocalLauncher, BadOptionsExitTwo) {
  EXPECT_EQ(run_command(kAxonn + " run -n 2 --nodes-sim 3 selftest").code, 2);
  EXPECT_EQ(run_command(kAxonn + " run -n 0 selftest").code, 2);
  EXPECT_EQ(run_command(kAxonn + " run -n 2").code, 2);
}

// Refused before PMIx_Init, which would look for a server: the message names the unset
// variables.
TEST(PmixWorker, OutsideAnyServerFailsAtOnceSayingWhatToDo) {
  const auto r = run_command("env -u PMIX_NAMESPACE " + kAxonn + " selftest");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "axonn selftest: no PMIx server started this process (PMIX_NAMESPACE and "
                                 "PMIX_SERVER_URI* are not set): start it with `srun --mpi=pmix ...` under Slurm, "
                                 "or `axonn run -n N ...`"))
      << r.output;
}

TEST(PmixWorker, NcclBackendWithoutAGpuFailsAtOnceSayingSo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device: the gpu label runs the NCCL selftest";
  const auto r = run_command(kAxonn + " run -n 2 selftest --backend nccl");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "] axonn selftest: no CUDA device: ")) << r.output;
  // Every rank that failed did so at the device check, before connecting to its peers: none
  // waited for another and gave up on a timeout.
  EXPECT_EQ(occurrences(r.output, "] axonn selftest: "), occurrences(r.output, "] axonn selftest: no CUDA device: "))
      << r.output;
}

TEST(PmixWorker, UnknownBackendIsBadInput) {
  const auto r = run_command(kAxonn + " run -n 1 selftest --backend mpi");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "--backend mpi: expected gloo or nccl")) << r.output;
}

TEST(PmixWorker, SameChecksUnderOpenMpiMpirun) {
  if (run_command("command -v mpirun").code != 0) GTEST_SKIP() << "mpirun not installed (apt-get install openmpi-bin)";
  const auto r =
      run_command("mpirun --allow-run-as-root --oversubscribe -n 4 " + kAxonn + " selftest --layout 2x1x2x1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: 196 passed, 0 failed")) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: rank 3/4 node 0/1")) << r.output;
}

}  // namespace
}  // namespace axonn::test
