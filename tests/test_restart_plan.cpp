// What `axonn run --max-restarts` decides after an attempt (runner/pmix/restart_plan.hpp), and
// how a restarted run accounts for its recovery (trainer/train/recovery_report.hpp), on
// hand-made launcher results, startup times and metrics files.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/config_error.hpp"
#include "core/wall_clock.hpp"
#include "runner/pmix/restart_plan.hpp"
#include "trainer/train/metrics_log.hpp"
#include "trainer/train/recovery_report.hpp"

namespace axonn {
namespace {

LocalJobOptions job(int ranks, int nodes) {
  LocalJobOptions o;
  o.ranks = ranks;
  o.nodes_sim = nodes;
  o.hostname = "h";
  return o;
}

// A failed attempt of `ranks` ranks: `killed` were SIGKILLed from outside, the others exited 1.
LocalJobResult failed(int ranks, const std::vector<int>& killed, int exit_code = 128 + SIGKILL) {
  LocalJobResult r;
  r.exit_code = exit_code;
  r.failure = "rank ... failed";
  for (int i = 0; i < ranks; ++i) {
    RankExit e;
    e.rank = i;
    e.exit_status = 1;
    r.exits.push_back(e);
  }
  for (int k : killed) {
    r.exits[static_cast<size_t>(k)].exit_status = -1;
    r.exits[static_cast<size_t>(k)].signal = SIGKILL;
  }
  return r;
}

TEST(RestartPlan, NothingAfterSuccessOrAStopOnRequest) {
  LocalJobResult ok;
  EXPECT_FALSE(plan_restart(job(4, 1), ok, 0, 3).restart);
  EXPECT_EQ(plan_restart(job(4, 1), ok, 0, 3).why, "");
  LocalJobResult interrupted = failed(4, {});
  interrupted.interrupted = true;
  const RestartPlan p = plan_restart(job(4, 1), interrupted, 0, 3);
  EXPECT_FALSE(p.restart);
  EXPECT_EQ(p.why, "the launcher was asked to stop");
}

TEST(RestartPlan, BadInputAndNoLayoutAreNotRestarted) {
  EXPECT_EQ(plan_restart(job(4, 1), failed(4, {}, 2), 0, 3).why,
            "exit 2 (bad input) would end the next attempt the same way");
  EXPECT_EQ(plan_restart(job(4, 1), failed(4, {}, 3), 0, 3).why,
            "exit 3 (no layout fits) would end the next attempt the same way");
}

TEST(RestartPlan, AFailedRankRestartsEveryRankUntilTheLimit) {
  const RestartPlan p = plan_restart(job(4, 2), failed(4, {1}), 0, 1);
  EXPECT_TRUE(p.restart);
  EXPECT_EQ(p.ranks, 4);
  EXPECT_EQ(p.nodes_sim, 2);
  EXPECT_EQ(p.why, "restarting all 4 ranks");
  const RestartPlan limit = plan_restart(job(4, 2), failed(4, {1}), 1, 1);
  EXPECT_FALSE(limit.restart);
  EXPECT_EQ(limit.why, "restart limit 1 reached (--max-restarts, else the job's run.max_restarts)");
}

TEST(RestartPlan, ANodeWhoseEveryRankWasKilledIsLeftOut) {
  const RestartPlan p = plan_restart(job(6, 3), failed(6, {2, 3}), 0, 2);
  EXPECT_TRUE(p.restart);
  EXPECT_EQ(p.ranks, 4);
  EXPECT_EQ(p.nodes_sim, 2);
  EXPECT_EQ(p.why, "pretend node h-n1 (ranks 2-3) was lost: restarting 4 ranks on 2 pretend nodes");
  // Where the launcher's memory copies go: the lost node's are dropped, the others follow.
  EXPECT_EQ(p.lost_hosts, std::vector<std::string>{"h-n1"});
  EXPECT_EQ(p.kept_hosts, (std::vector<std::string>{"h-n0", "h-n2"}));
  const RestartPlan two = plan_restart(job(6, 3), failed(6, {0, 1, 4, 5}), 0, 2);
  EXPECT_EQ(two.ranks, 2);
  EXPECT_EQ(two.why,
            "pretend nodes h-n0 (ranks 0-1), h-n2 (ranks 4-5) were lost: restarting 2 ranks on 1 pretend node");
}

TEST(RestartPlan, ANodeIsKeptWhenOneOfItsRanksSurvivedOrTheLauncherKilledIt) {
  EXPECT_EQ(plan_restart(job(6, 3), failed(6, {2}), 0, 2).ranks, 6);  // rank 3 of the node exited
  LocalJobResult by_launcher = failed(6, {2, 3});
  by_launcher.exits[3].killed_by_launcher = true;  // after the grace period
  EXPECT_EQ(plan_restart(job(6, 3), by_launcher, 0, 2).ranks, 6);
}

TEST(RestartPlan, LosingEveryNodeRestartsThemAll) {
  const RestartPlan p = plan_restart(job(2, 1), failed(2, {0, 1}), 0, 1);
  EXPECT_TRUE(p.restart);
  EXPECT_EQ(p.ranks, 2);
  EXPECT_EQ(p.why, "restarting all 2 ranks");
}

TEST(RecoveryReport, PhasesAddUpFromTheFailureToTheFirstStep) {
  StartupTimes startup = StartupTimes::since_process_start();
  startup.mark("communicators");
  startup.mark("checkpoint_loaded");
  startup.mark("first_step");
  const double start = startup.process_start_unix_s();
  const RecoveryTimes times{1, start - 2.0, start - 1.5, std::nullopt};
  const RecoveryReport r = recovery_report(times, startup, 8, 11);
  ASSERT_EQ(r.phases.size(), 5u);
  EXPECT_EQ(r.phases[0].first, "stop");
  EXPECT_NEAR(r.phases[0].second, 0.5, 1e-6);
  EXPECT_NEAR(r.phases[1].second, 1.5, 1e-6);  // restart: the last rank gone -> this process
  double sum = 0;
  for (const auto& [name, seconds] : r.phases) sum += seconds;
  EXPECT_NEAR(sum, r.total_s, 1e-6);
  EXPECT_EQ(r.steps_redone, 3);
  EXPECT_EQ(describe_recovery(r).rfind("restart 1: ", 0), 0u) << describe_recovery(r);
  EXPECT_NE(describe_recovery(r).find("; resumed from step 8, 3 step(s) done again"), std::string::npos);
  EXPECT_EQ(recovery_json(r).rfind("{\"restart\": 1, \"total_s\": ", 0), 0u) << recovery_json(r);
  EXPECT_NE(recovery_json(r).find("\"resumed_step\": 8, \"steps_redone\": 3}"), std::string::npos);
}

// Under sbatch the launcher's time is the failed srun step's end; the ranks that noticed the
// failure first date it. Their notes are read once, the earliest wins, and none is left.
TEST(RecoveryReport, TheEarliestFailureNoteDatesTheFailure) {
  const auto run_dir = std::filesystem::temp_directory_path() / ("failure-notes-" + std::to_string(getpid()));
  std::filesystem::remove_all(run_dir);
  EXPECT_FALSE(take_failure_notes(run_dir));
  note_failure(run_dir, 3);
  const double after_first = unix_seconds_now();
  note_failure(run_dir, 1);
  std::ofstream(run_dir / "failures" / "rank-00002");  // a rank that died while writing its note
  const std::optional<FailureNote> note = take_failure_notes(run_dir);
  ASSERT_TRUE(note);
  EXPECT_EQ(note->rank, 3);
  EXPECT_LE(note->unix_s, after_first);
  EXPECT_FALSE(std::filesystem::exists(run_dir / "failures"));
  EXPECT_FALSE(take_failure_notes(run_dir));

  const RecoveryTimes srun_ended{1, note->unix_s + 10, note->unix_s + 10, std::nullopt};
  const RecoveryTimes dated = with_failure_note(srun_ended, note);
  EXPECT_EQ(dated.failed_unix_s, note->unix_s);
  EXPECT_EQ(dated.noticed_by, 3);
  EXPECT_EQ(dated.ended_unix_s, srun_ended.ended_unix_s);
  const RecoveryTimes launcher_first{1, note->unix_s - 1, note->unix_s, std::nullopt};
  EXPECT_FALSE(with_failure_note(launcher_first, note).noticed_by);  // a local launcher saw it earlier

  StartupTimes startup = StartupTimes::since_process_start();
  startup.mark("communicators");
  startup.mark("checkpoint_loaded");
  startup.mark("first_step");
  const RecoveryReport r = recovery_report(dated, startup, 8, 11);
  EXPECT_NEAR(r.phases[0].second, 10.0, 1e-6);  // stop: noticed -> the step's end
  EXPECT_NE(describe_recovery(r).find(" s from the failure (noticed by rank 3) to the first step ("), std::string::npos)
      << describe_recovery(r);
  EXPECT_NE(recovery_json(r).find("\"noticed_by_rank\": 3, \"stop_s\": "), std::string::npos) << recovery_json(r);
  std::filesystem::remove_all(run_dir);
}

TEST(RecoveryReport, TheEnvironmentIsReadOrRefusedNamingTheVariables) {
  unsetenv("AXONN_RESTART");
  unsetenv("AXONN_RECOVERY");
  EXPECT_FALSE(recovery_times_from_environment());
  setenv("AXONN_RESTART", "0", 1);
  setenv("AXONN_RECOVERY", "10.5 11", 1);
  EXPECT_FALSE(recovery_times_from_environment());  // a first attempt
  setenv("AXONN_RESTART", "2", 1);
  const auto t = recovery_times_from_environment();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->restart, 2);
  EXPECT_EQ(t->failed_unix_s, 10.5);
  EXPECT_EQ(t->ended_unix_s, 11);
  for (const char* bad : {"10.5", "11 10.5", "a b", "1 2 3"}) {
    setenv("AXONN_RECOVERY", bad, 1);
    EXPECT_THROW(recovery_times_from_environment(), ConfigError) << bad;
  }
  unsetenv("AXONN_RESTART");
  unsetenv("AXONN_RECOVERY");
}

TEST(RecoveryReport, TheLastLoggedStepIsTheFilesLastStepLine) {
  const auto path = std::filesystem::temp_directory_path() / ("metrics-" + std::to_string(getpid()) + ".jsonl");
  EXPECT_FALSE(last_logged_step(path));
  {
    std::ofstream out(path);
    for (int s = 1; s <= 3000; ++s)  // longer than the tail it reads
      out << "{\"step\": " << s << ", \"loss\": 5.5, \"predicted_step_s\": 0.1, \"data_cursor\": " << s * 24 << "}\n";
    out << "{\"step\": 29";  // a line cut by the failure: still a step that was logged
  }
  EXPECT_EQ(last_logged_step(path), 29);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace axonn
