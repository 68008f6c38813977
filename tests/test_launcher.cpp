// `axonn run`: the local launcher as users see it, with `axonn selftest` as the worker:
// topology values, every collective on every axis of several layouts, labelled output,
// failure handling, signal forwarding, no orphans; and the same worker under mpirun.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <thread>

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
  EXPECT_TRUE(contains(r.output, "[0] selftest: 100 passed, 0 failed")) << r.output;
}

TEST(LocalLauncher, EightRanksOnTwoPretendNodesOverSeveralLayouts) {
  for (const char* layout : {"2x2x1x2", "1x2x2x2", "2x1x2x2:yxzd", "1x1x1x8", "8x1x1x1:dxyz", "1x2x4x1"}) {
    const auto r =
        run_command("AXONN_LAYOUT=" + std::string(layout) + " " + kAxonn + " run -n 8 --nodes-sim 2 selftest");
    ASSERT_EQ(r.code, 0) << layout << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "[0] selftest: 200 passed, 0 failed")) << layout << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "[5] selftest: rank 5/8 node 1/2 (" + host() + "-n1) local 1/4 peers 4,5,6,7"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "[2] selftest: rank 2/8 node 0/2 (" + host() + "-n0) local 2/4 peers 0,1,2,3"))
        << r.output;
  }
}

TEST(LocalLauncher, SingleRank) {
  const auto r = run_command(kAxonn + " run -n 1 selftest");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[0] selftest: 25 passed, 0 failed")) << r.output;
}

TEST(LocalLauncher, RankKilledMidCollectiveStopsTheJobAndIsNamed) {
  const auto r = run_command(kAxonn + " run -n 4 selftest --layout 1x2x2x1 --kill-rank 2 --timeout-ms 20000");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: rank 2 was killed by signal 9")) << r.output;
  EXPECT_LT(r.seconds, 10.0) << "the launcher waited for the collective timeout instead of acting on the death";
  EXPECT_EQ(run_command("pgrep -f \"[s]elftest --layout 1x2x2x1 --kill-rank\"").output, "");
}

TEST(LocalLauncher, StalledRankTimesOutNamingAxisCollectiveAndRanks) {
  const auto r =
      run_command(kAxonn + " run -n 4 --grace-ms 500 selftest --layout 1x2x2x1 --stall-rank 3 --timeout-ms 1500");
  EXPECT_NE(r.code, 0) << r.output;
  // Rank 3's groups are x {2,3} and y {1,3}: rank 2 or rank 1 gives up first, naming it
  // (the latency path of the 4000-byte all-reduce knows which peer it waited for).
  EXPECT_TRUE(contains(r.output,
                       "all_reduce on group 'x' (world ranks 2,3, 4000 bytes) failed or timed out after 1500 ms: a "
                       "peer did not arrive or died (waiting for world rank 3: ") ||
              contains(r.output,
                       "all_reduce on group 'y' (world ranks 1,3, 4000 bytes) failed or timed out after 1500 ms: a "
                       "peer did not arrive or died (waiting for world rank 3: "))
      << r.output;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(run_command("pgrep -f \"[s]elftest --layout 1x2x2x1 --stall-rank\"").output, "");
}

TEST(LocalLauncher, FailingRankExitStatusIsReportedAndOthersStopped) {
  const auto r =
      run_command(kAxonn + " run -n 3 -- sh -c \"if [ \\$PMIX_RANK = 1 ]; then exit 3; fi; exec sleep 41.5\"");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_TRUE(contains(r.output, "axonn run: rank 1 exited with status 3")) << r.output;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(run_command("pgrep -f \"[s]leep 41.5\"").output, "");
}

TEST(LocalLauncher, SigtermIsForwardedToEveryRank) {
  const std::string log = std::string(AXONN_BINARY_DIR) + "/launcher_sigterm.log";
  const pid_t launcher = fork();
  if (launcher == 0) {
    const std::string cmd =
        kAxonn + " run -n 2 -- sh -c 'trap \"echo got TERM; exit 0\" TERM; echo ready; sleep 42.5 & wait' > " + log +
        " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  // Wait until both ranks have set their trap (up to 30 s: a loaded machine starts them
  // slowly, and a TERM before the trap kills a shell without its line), then signal the
  // launcher (found by name; the pattern's brackets keep pkill's own shell from matching).
  for (int i = 0; i < 600 && run_command("grep -c ready " + log).output != "2\n"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(run_command("grep -c ready " + log).output, "2\n") << run_command("cat " + log).output;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the shells reach `wait`
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(run_command("pkill -TERM -f \"bin/axon[n] run -n 2 -- sh -c\"").code, 0);
  int status = 0;
  waitpid(launcher, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string out = run_command("cat " + log).output;
  EXPECT_TRUE(contains(out, "[0] got TERM")) << out;
  EXPECT_TRUE(contains(out, "[1] got TERM")) << out;
  EXPECT_LT(seconds, 10.0);
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

TEST(LocalLauncher, BadOptionsExitTwo) {
  EXPECT_EQ(run_command(kAxonn + " run -n 2 --nodes-sim 3 selftest").code, 2);
  EXPECT_EQ(run_command(kAxonn + " run -n 0 selftest").code, 2);
  EXPECT_EQ(run_command(kAxonn + " run -n 2").code, 2);
}

TEST(PmixWorker, OutsideAnyServerFailsAtOnceSayingWhatToDo) {
  const auto r = run_command("env -u PMIX_NAMESPACE " + kAxonn + " selftest");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.output, "start it with `srun --mpi=pmix ...` under Slurm, or `axonn run -n N ...`"))
      << r.output;
  EXPECT_LT(r.seconds, 2.0);
}

TEST(PmixWorker, NcclBackendWithoutAGpuFailsAtOnceSayingSo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device: the gpu label runs the NCCL selftest";
  const auto r = run_command(kAxonn + " run -n 2 selftest --backend nccl");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "] axonn selftest: no CUDA device: ")) << r.output;
  EXPECT_LT(r.seconds, 10.0);
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
  EXPECT_TRUE(contains(r.output, "selftest: 100 passed, 0 failed")) << r.output;
  EXPECT_TRUE(contains(r.output, "selftest: rank 3/4 node 0/1")) << r.output;
}

}  // namespace
}  // namespace axonn::test
