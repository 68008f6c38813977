// `axonn train` and its checkpoint directory, as users meet it: real processes under the local
// launcher. No committed step is ever lost:
// - a second run on a directory a run holds exits 2 naming the holder, and the first goes on;
// - a lost `latest` resumes from the newest step that verifies, and that run's retention keeps
//   the newer steps it skipped;
// - --fallback resumes past a step without index.h5 and past a `latest` naming no step;
// - a finished job run again exits 0 and leaves its summary and metrics alone;
// - a directory that cannot be written stops every rank with exit 2 before training; a disk
//   that is short is warned about at start-up, and one that fills during a save stops the run
//   with one line naming the file and the bytes it needs, `latest` untouched.
#include <gtest/gtest.h>

#include <thread>

#include "train_helpers.hpp"

namespace axonn::test {
namespace {

namespace fs = std::filesystem;

class TrainCheckpointDir : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("ckpt-dir"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // A run of tiny_job(steps, interval) in dir_/name; its output and exit code.
  CommandResult train(const std::string& name, int ranks, int steps, int interval, const std::string& extra = "") {
    const fs::path dir = dir_ / name;
    fs::create_directories(dir);
    if (!fs::exists(dir / "job.toml")) write_file(dir / "job.toml", tiny_job(steps, interval));
    return run_train(dir, ranks, "", extra);
  }
  fs::path dir_;
};

// The `pkill` that signals this test's launcher and nothing else.
void signal_launcher(const fs::path& dir, int ranks, const char* signal) {
  run_command(std::string("pkill -") + signal + " -f \"" + launcher_pattern(dir, ranks) + "\"");
}

// Waits (up to 60 s) until the run in `dir` has logged `steps` steps.
bool wait_for_steps(const fs::path& dir, size_t steps) {
  return wait_until([&] { return read_metrics(dir / "run").size() >= steps; },
                    "the run in " + dir.string() + " did not log " + std::to_string(steps) + " steps");
}

TEST_F(TrainCheckpointDir, ASecondRunOnTheDirectoryExitsTwoNamingTheHolderAndTheFirstGoesOn) {
  const fs::path first = dir_ / "shared";
  fs::create_directories(first);
  write_file(first / "job.toml", tiny_job(100000, 5));
  CommandResult holder;
  std::thread running([&] { holder = run_train(first, 2, "", "", 1, 300); });
  ASSERT_TRUE(wait_for_steps(first, 6)) << "the first run did not start";
  // The second run: the same job, another launcher (its own job file in another folder,
  // pointing at the first run's checkpoint directory).
  const fs::path second = dir_ / "second";
  fs::create_directories(second);
  std::string job = tiny_job(100000, 5);
  job.replace(job.find("dir = \"ckpt\""), 12, "dir = \"" + (first / "ckpt").string() + "\"");
  write_file(second / "job.toml", job);
  const CommandResult refused = run_train(second, 2, "");
  const size_t steps_then = read_metrics(first / "run").size();
  signal_launcher(first, 2, "USR1");
  running.join();

  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_TRUE(contains(refused.output, "checkpoint directory " + (first / "ckpt").string() + " is in use: pid "))
      << refused.output;
  EXPECT_TRUE(contains(refused.output, "wait for it to finish, stop it, or give this run another checkpoint.dir"))
      << refused.output;
  EXPECT_FALSE(fs::exists(second / "run" / "metrics.jsonl")) << "the refused run trained";
  // The holder trained on through the refusal and committed its last step on the signal.
  EXPECT_EQ(holder.code, 75) << holder.output;
  const std::vector<StepLine> steps = read_metrics(first / "run");
  EXPECT_GE(steps.size(), steps_then);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].step, static_cast<int64_t>(i + 1));
  const std::string latest = read_text(first / "ckpt" / "latest");
  EXPECT_EQ(latest, "step-" + std::string(9 - std::to_string(steps.size()).size(), '0') +
                        std::to_string(steps.size()) + "\n");
  EXPECT_EQ(run_command(kAxonn + " ckpt verify " + (first / "ckpt").string()).code, 0);
  EXPECT_EQ(read_text(first / "ckpt" / "run.lock"), "") << "a clean exit releases the lock";
}

TEST_F(TrainCheckpointDir, ALostLatestResumesFromTheNewestStepThatVerifiesAndKeepsTheNewerOne) {
  // The reference: 6 steps, then steps 5-8 from step 4 with `latest` intact (the learning
  // rate schedule follows training.steps, so both runs change it at the same point).
  const std::string more = "training.steps=8 checkpoint.interval=0 checkpoint.keep=1";
  ASSERT_EQ(train("reference", 2, 6, 2).code, 0);
  write_file(dir_ / "reference" / "ckpt" / "latest", "step-000000004\n");
  const CommandResult reference = train("reference", 2, 6, 2, more);
  ASSERT_EQ(reference.code, 0) << reference.output;
  const std::vector<StepLine> want = read_metrics(dir_ / "reference" / "run");
  ASSERT_EQ(want.size(), 10u);

  ASSERT_EQ(train("lost", 2, 6, 2).code, 0);
  const fs::path ckpt = dir_ / "lost" / "ckpt";
  fs::remove(ckpt / "latest");
  const StoredRect source = CheckpointReader(ckpt / "step-000000006").tensor("wte").sources.at(0);
  flip_stored_byte(ckpt / "step-000000006", "wte", source);

  // Steps 7-8 with one save at the end and keep = 1: retention would delete step 6 (older
  // than 8, not `latest`) if the run did not protect what it skipped.
  const CommandResult resumed = train("lost", 2, 6, 2, more);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "`latest` is missing in " + ckpt.string() +
                                           "; resuming from step-000000004, the newest committed step that verifies"))
      << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "skipped step-000000006: ")) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "keeping step-000000006 (newer than the step resumed from)")) << resumed.output;
  const std::vector<StepLine> steps = read_metrics(dir_ / "lost" / "run");
  ASSERT_EQ(steps.size(), 10u) << "steps 1-6, then 5-8 again from step 4";
  for (size_t i = 6; i < 10; ++i) {
    EXPECT_EQ(steps[i].step, want[i].step);
    EXPECT_EQ(steps[i].loss, want[i].loss) << "step " << want[i].step << ": the same layout gives the same bits";
    EXPECT_EQ(steps[i].data_cursor, want[i].data_cursor);
  }
  EXPECT_TRUE(fs::is_directory(ckpt / "step-000000006"));
  EXPECT_TRUE(fs::is_directory(ckpt / "step-000000008"));
  EXPECT_FALSE(fs::exists(ckpt / "step-000000004")) << "keep = 1 still applies to the run's own steps";
  EXPECT_EQ(read_text(ckpt / "latest"), "step-000000008\n");
}

TEST_F(TrainCheckpointDir, FallbackResumesPastAStepWithoutIndexAndALatestNamingNoStep) {
  ASSERT_EQ(train("fb", 2, 6, 2).code, 0);
  const fs::path ckpt = dir_ / "fb" / "ckpt";
  fs::remove(ckpt / "step-000000006" / "index.h5");
  const CommandResult refused = train("fb", 2, 6, 2, "training.steps=8");
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_TRUE(contains(refused.output, (ckpt / "step-000000006" / "index.h5").string())) << refused.output;

  const CommandResult past_index = train("fb", 2, 6, 2, "training.steps=8 --fallback");
  ASSERT_EQ(past_index.code, 0) << past_index.output;
  EXPECT_TRUE(contains(past_index.output, "FELL BACK to " + (ckpt / "step-000000004").string())) << past_index.output;
  EXPECT_TRUE(contains(read_text(dir_ / "fb" / "run" / "summary.json"), "\"start_step\": 4"));

  write_file(ckpt / "latest", "step-000000012\n");
  const CommandResult missing = train("fb", 2, 6, 2, "training.steps=10");
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_TRUE(contains(missing.output, "step-000000012 does not exist")) << missing.output;
  const CommandResult past_missing = train("fb", 2, 6, 2, "training.steps=10 --fallback");
  ASSERT_EQ(past_missing.code, 0) << past_missing.output;
  EXPECT_TRUE(contains(past_missing.output, "FELL BACK to " + (ckpt / "step-000000008").string()))
      << past_missing.output;
  EXPECT_TRUE(contains(read_text(dir_ / "fb" / "run" / "summary.json"), "\"start_step\": 8"));
}

TEST_F(TrainCheckpointDir, AFinishedJobRunAgainExitsZeroAndLeavesItsSummaryAndMetrics) {
  ASSERT_EQ(train("done", 2, 4, 2).code, 0);
  const fs::path run = dir_ / "done" / "run";
  const std::string summary = read_text(run / "summary.json");
  const std::string metrics = read_text(run / "metrics.jsonl");
  const auto written = fs::last_write_time(run / "summary.json");
  const CommandResult again = train("done", 2, 4, 2);
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "train: nothing to do: " + (dir_ / "done" / "ckpt").string() +
                                         " holds step 4 and training.steps is 4, so this run has finished"))
      << again.output;
  EXPECT_EQ(read_text(run / "summary.json"), summary);
  EXPECT_EQ(fs::last_write_time(run / "summary.json"), written);
  EXPECT_EQ(read_text(run / "metrics.jsonl"), metrics);
}

// The tiny job in `dir` with its `dir = "<relative>"` line (checkpoint's "ckpt" or run's
// "run") moved under a regular file, not-a-dir/<relative>, which no user can create.
void write_job_with_a_dir_under_a_file(const fs::path& dir, const std::string& relative) {
  fs::create_directories(dir);
  write_file(dir / "not-a-dir", "x");
  std::string job = tiny_job(4, 2);
  const std::string line = "dir = \"" + relative + "\"";
  job.replace(job.find(line), line.size(), "dir = \"not-a-dir/" + relative + "\"");
  write_file(dir / "job.toml", job);
}

TEST_F(TrainCheckpointDir, ADirectoryThatCannotBeWrittenStopsEveryRankWithExitTwoBeforeTraining) {
  write_job_with_a_dir_under_a_file(dir_ / "blocked", "ckpt");
  const CommandResult r = train("blocked", 2, 4, 2);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, (dir_ / "blocked" / "not-a-dir" / "ckpt").string() +
                                     ": Not a directory; set checkpoint.dir to a directory this user can create"))
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "blocked" / "run" / "metrics.jsonl")) << "a rank trained";
}

// The same for run.dir (metrics, summary, traces): one line from rank 0 naming the directory
// and the fix, exit 2, nothing trained, no rank blaming another.
TEST_F(TrainCheckpointDir, ARunDirThatCannotBeWrittenStopsEveryRankWithExitTwoBeforeTraining) {
  write_job_with_a_dir_under_a_file(dir_ / "blocked-run", "run");
  const CommandResult r = train("blocked-run", 2, 4, 2);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "run.dir " + (dir_ / "blocked-run" / "not-a-dir" / "run").string() + ": ")) << r.output;
  EXPECT_TRUE(contains(r.output, "; set run.dir to a directory this user can write")) << r.output;
  EXPECT_FALSE(contains(r.output, "did not arrive")) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "blocked-run" / "ckpt" / "latest")) << "a rank trained";
}

TEST_F(TrainCheckpointDir, AShortDiskIsWarnedAboutAndAFullOneFailsTheSaveInOneLineLeavingLatest) {
  if (run_command("unshare -m true").code != 0) GTEST_SKIP() << "unshare -m needs root here: no private mounts";
  const fs::path dir = dir_ / "small";
  fs::create_directories(dir / "ckpt");
  write_file(dir / "job.toml", tiny_job(2, 2));
  // In a private mount namespace (it vanishes with the shell): a 4 MiB tmpfs holds step 2;
  // then a filler leaves ~600 KiB, less than two checkpoints (2 x 410 KiB) and less than a
  // shard's space reservation, so the save of step 4 fails; the checks run inside.
  const std::string axonn_run = "AXONN_LAYOUT=1x1x1x1 " + kAxonn + " run -n 1 " + (dir / "job.toml").string();
  write_file(dir / "full-disk.sh",
             "cd " + dir.string() + " || exit 9\n"
             "mount -t tmpfs -o size=4m tmpfs ckpt || exit 9\n" +
                 axonn_run + " > first.log 2>&1 || exit 9\n"
                 "avail=$(df --output=avail -B1 ckpt | tail -1)\n"
                 "fallocate -l $((avail - 600 * 1024)) ckpt/filler || exit 9\n" +
                 axonn_run + " training.steps=4\n"
                 "echo \"second run exit $?\"\n"
                 "echo \"latest: $(cat ckpt/latest)\"\n" +
                 kAxonn + " ckpt verify ckpt\n"
                 "echo \"verify exit $?\"\n");
  const CommandResult r = run_command("unshare -m sh " + (dir / "full-disk.sh").string(), 120);
  ASSERT_NE(r.code, 9) << "setting up the small file system failed:\n" << r.output;
  EXPECT_TRUE(contains(r.output, "checkpoint: only 0.6 MiB free on the file system of " + (dir / "ckpt").string() +
                                     "; a save needs room for two checkpoints of this model (0.4 MiB each"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "second run exit 1")) << r.output;
  // The failure is one line: the shard, what it needs, what is free; no HDF5 stack.
  const std::string marker = "axonn train: ";
  const size_t at = r.output.find(marker + "no space to write " + (dir / "ckpt").string() +
                                  "/.tmp-step-000000004/shard-00000.h5: it needs ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_TRUE(contains(line, " free; free ")) << line;
  EXPECT_FALSE(contains(r.output, "HDF5")) << r.output;
  EXPECT_TRUE(contains(r.output, "latest: step-000000002")) << r.output;
  EXPECT_TRUE(contains(r.output, "verify exit 0")) << r.output;
}

}  // namespace
}  // namespace axonn::test
