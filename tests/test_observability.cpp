// Seeing inside a run: per-rank timelines of the traced steps (run.trace_steps), the
// communication profile in summary.json, a slow rank named as the straggler, and the hang
// trace a failed collective leaves. Real `axonn run` processes on the tiny job; the files are
// read back by tests/trace_check.py with Python's json.
#include <gtest/gtest.h>

#include "config/config_error.hpp"
#include "config/job_config.hpp"
#include "core/trace_recorder.hpp"
#include "train_helpers.hpp"
#include "trainer/train/straggler_watch.hpp"

namespace axonn::test {
namespace {

const std::string kPython = "/usr/bin/python3";

class Observability : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("observe"); }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

// 4 ranks with x = 2 (blocking all-reduces) and z = 2 (all-gathers and reduce-scatters started
// beside compute): steps 2-3 traced on every rank, their collectives' bytes equal to the
// counted ones, the merged file one process per rank, and the profile's bytes the counters'.
TEST_F(Observability, TracedStepsOfEveryRankMatchTheCountedCollectives) {
  write_file(dir_ / "job.toml", tiny_job(4, 0));
  const CommandResult r = run_train(dir_, 4, "1x2x1x2", "--trace-steps 2-3");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("trace: steps 2-3 of every rank in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("communication profile (rank 0, 4 steps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("z all_gather (2 ranks"), std::string::npos) << r.output;
  const CommandResult check = run_command(
      kPython + " " + std::string(kSourceDir) + "/tests/trace_check.py " + (dir_ / "run").string() + " 4 2 3", 120);
  EXPECT_EQ(check.code, 0) << check.output;
}

// Without run.trace_steps nothing is traced: no trace folder.
TEST_F(Observability, AnUntracedRunWritesNoTrace) {
  write_file(dir_ / "job.toml", tiny_job(2, 0));
  const CommandResult r = run_train(dir_, 2, "2x1x1x1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "trace")) << r.output;
  EXPECT_EQ(r.output.find("trace:"), std::string::npos) << r.output;
}

// Rank 1 sleeps 60 ms in every step (a test-only switch): rank 0 names it, and its host.
TEST_F(Observability, ASlowRankIsNamedAsTheStraggler) {
  write_file(dir_ / "job.toml", tiny_job(12, 0));
  const CommandResult r = run_command("cd " + dir_.string() + " && AXONN_TEST_SLOW_RANK=1:60 AXONN_LAYOUT=2x1x1x1 " +
                                          kAxonn + " run -n 2 " + (dir_ / "job.toml").string() + " 2>&1",
                                      180);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("straggler: rank 1 on "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("straggler: rank 0"), std::string::npos) << r.output;
}

// Rank 1 sleeps past the collective timeout in its first step: rank 0's collective fails and
// every rank writes its last events, the error at their end, to trace/hang-rank-N.json.
TEST_F(Observability, AFailedCollectiveLeavesTheRanksLastEvents) {
  write_file(dir_ / "job.toml", tiny_job(3, 0));
  const CommandResult r =
      run_command("cd " + dir_.string() + " && AXONN_TEST_SLOW_RANK=1:6000 AXONN_LAYOUT=2x1x1x1 " + kAxonn +
                      " run -n 2 " + (dir_ / "job.toml").string() + " --timeout-ms 1500 2>&1",
                  120);
  ASSERT_NE(r.code, 0) << r.output;
  const std::filesystem::path hang = dir_ / "run" / "trace" / "hang-rank-0.json";
  ASSERT_TRUE(std::filesystem::exists(hang)) << r.output;
  EXPECT_NE(r.output.find("trace: rank 0's last 100 events before the failed collective are in"), std::string::npos)
      << r.output;
  const CommandResult valid = run_command(kPython + " -m json.tool " + hang.string() + " > /dev/null", 60);
  EXPECT_EQ(valid.code, 0) << valid.output << read_text(hang);
  const std::string events = read_text(hang);
  EXPECT_NE(events.find("\"cat\": \"phase\""), std::string::npos) << events;  // where it was
  const size_t note = events.find("\"name\": \"written here\", \"cat\": \"note\"");
  ASSERT_NE(note, std::string::npos) << events;
  EXPECT_NE(events.find("timed out after 1500 ms", note), std::string::npos) << events;
}

TEST(TraceRecorder, KeepsTheTracedEventsWhileActiveAndTheLastHundredAlways) {
  TraceRecorder trace(3, "rank 3 (\"host\")");
  const auto t = TraceRecorder::Clock::now();
  trace.span("op", "not kept: inactive and not recent", t, t, {}, "", false);
  for (int i = 0; i < 150; ++i) {
    std::string name = "c";  // appended: GCC 12's -O3 warns falsely on "c" + std::string
    name += std::to_string(i);
    trace.span("comm", name, t, t);
  }
  EXPECT_EQ(trace.traced_events(), 0u);
  trace.set_active(true);
  trace.span("op", "gemm", t, t + std::chrono::microseconds(5), {{"flops", "42"}}, "", false);
  EXPECT_EQ(trace.traced_events(), 1u);
  const auto dir = fresh_dir("trace-recorder");
  std::string why;
  ASSERT_TRUE(trace.write_recent(dir / "hang.json", "a \"quoted\" error\n", &why)) << why;
  ASSERT_TRUE(trace.write(dir / "rank.json", &why)) << why;
  for (const char* file : {"hang.json", "rank.json"}) {
    const CommandResult valid = run_command(kPython + " -m json.tool " + (dir / file).string() + " > /dev/null", 60);
    EXPECT_EQ(valid.code, 0) << file << ": " << valid.output << read_text(dir / file);
  }
  // The recent ones: the last 100 of the 150 (the op is traced only), then the note.
  const std::string hang = read_text(dir / "hang.json");
  EXPECT_EQ(hang.find("\"c49\""), std::string::npos);
  EXPECT_NE(hang.find("\"c50\""), std::string::npos);
  EXPECT_NE(hang.find("\"c149\""), std::string::npos);
  EXPECT_EQ(hang.find("\"gemm\""), std::string::npos);
  EXPECT_NE(hang.find("\"why\": \"a \\\"quoted\\\" error\\u000a\""), std::string::npos) << hang;
  EXPECT_EQ(hang.find("not kept"), std::string::npos);
  const std::string rank = read_text(dir / "rank.json");
  EXPECT_EQ(rank.find("\"c1"), std::string::npos) << rank;
  EXPECT_NE(rank.find("\"name\": \"gemm\", \"cat\": \"op\""), std::string::npos) << rank;
  EXPECT_NE(rank.find("\"dur\": 5.000, \"pid\": 3"), std::string::npos) << rank;
  EXPECT_NE(rank.find("\"args\": {\"flops\": 42}"), std::string::npos) << rank;
  EXPECT_NE(rank.find("\"args\": {\"name\": \"rank 3 (\\\"host\\\")\"}"), std::string::npos) << rank;
  std::filesystem::remove_all(dir);
}

TEST(StragglerWatch, NamesTheSameSlowRankAfterThreeIntervalsInARow) {
  StragglerWatch watch(1.2, {"a", "b", "c"});
  EXPECT_FALSE(watch.observe(1, {1.0f, 1.5f, 1.0f}));
  EXPECT_FALSE(watch.observe(2, {1.0f, 1.5f, 1.0f}));
  const std::optional<std::string> named = watch.observe(3, {1.0f, 1.5f, 1.0f});
  ASSERT_TRUE(named);
  EXPECT_NE(named->find("rank 1 on b is 1.50x the median"), std::string::npos) << *named;
  // Another rank slow, or everyone within the factor, starts the count again.
  EXPECT_FALSE(watch.observe(4, {1.5f, 1.0f, 1.0f}));
  EXPECT_FALSE(watch.observe(5, {1.1f, 1.0f, 1.0f}));
  EXPECT_FALSE(watch.observe(6, {1.0f, 1.0f, 1.5f}));
  EXPECT_FALSE(watch.observe(7, {1.0f, 1.0f, 1.5f}));
  EXPECT_TRUE(watch.observe(8, {1.0f, 1.0f, 1.5f}));
  EXPECT_FALSE(StragglerWatch(1.2, {}).observe(9, {1.0f}));  // one rank: nobody to compare with
}

TEST(StepRange, ParsesAStepOrARangeAndNamesWhatIsWrong) {
  EXPECT_EQ(parse_step_range("run.trace_steps", "10-12"), (StepRange{10, 12}));
  EXPECT_EQ(parse_step_range("run.trace_steps", "7"), (StepRange{7, 7}));
  for (const char* bad : {"", "0", "12-10", "a-b", "3-", "-3", "1.5"}) {
    try {
      parse_step_range("run.trace_steps", bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("run.trace_steps = \"" + std::string(bad) + "\""), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("e.g. \"10-12\""), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace axonn::test
