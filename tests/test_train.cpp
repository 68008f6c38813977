// `axonn train` as users run it: real processes under the local launcher, real Gloo, real
// checkpoints. The defining tests of the 4D trainer:
// - every layout of 1, 2, 4 and 8 ranks trains 5 steps to the serial run's losses and final
//   weights, and every rank's counted bytes equal the layout model's;
// - a run saved at one layout resumes at others (world 3 included) and continues exactly;
// - a preemption signal stops every rank at one step boundary with a committed checkpoint,
//   and the resumed run ends where an uninterrupted one does.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "layout/layout.hpp"
#include "train_helpers.hpp"

namespace axonn::test {
namespace {

// Float32 sums in other orders (row sums split over x, partial GEMMs summed over ranks,
// gradients summed over z and data in other groupings) change results in the last bits; 5
// AdamW steps keep that at the 1e-6 level for the loss (~5.5, ulp 4.8e-7), which is what
// these bounds allow. Weights move by ~lr = 1e-2 per step, so 2e-5 absolute is 0.2% of one
// step's update.
constexpr double kLossTolerance = 2e-5;
constexpr float kWeightTolerance = 2e-5f;

struct TrainedRun {
  std::vector<StepLine> steps;
  std::map<std::string, std::vector<float>> tensors;
  std::string summary;
};

TrainedRun train(const std::filesystem::path& dir, int ranks, const std::string& layout, int steps, int interval,
                 int nodes_sim = 1, const std::string& overrides = "") {
  std::filesystem::create_directories(dir);
  write_file(dir / "job.toml", tiny_job(steps, interval));
  const CommandResult r = run_train(dir, ranks, layout, overrides, nodes_sim);
  EXPECT_EQ(r.code, 0) << layout << ":\n" << r.output;
  TrainedRun run;
  run.steps = read_metrics(dir / "run");
  if (std::filesystem::exists(dir / "ckpt" / "latest")) run.tensors = read_tensors(dir / "ckpt");
  run.summary = read_text(dir / "run" / "summary.json");
  return run;
}

void expect_same_run(const TrainedRun& got, const TrainedRun& want, const std::string& what) {
  ASSERT_EQ(got.steps.size(), want.steps.size()) << what;
  for (size_t i = 0; i < want.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].step, want.steps[i].step) << what;
    EXPECT_NEAR(got.steps[i].loss, want.steps[i].loss, kLossTolerance) << what << " step " << want.steps[i].step;
    EXPECT_EQ(got.steps[i].data_cursor, want.steps[i].data_cursor) << what;
  }
  expect_same_tensors(got.tensors, want.tensors, kWeightTolerance, what);
}

class TrainLayouts : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

// The serial reference, trained once per test process.
const TrainedRun& serial_run(const std::filesystem::path& dir) {
  static const TrainedRun run = train(dir / "serial", 1, "1x1x1x1", 5, 0);
  return run;
}

TEST_P(TrainLayouts, FiveStepsEqualTheSerialRun) {
  const Layout layout = parse_layout(GetParam());
  dir_ = fresh_dir("layout-" + format_layout(layout));
  const TrainedRun& serial = serial_run(dir_);
  ASSERT_EQ(serial.steps.size(), 5u);
  EXPECT_LT(serial.steps.back().loss, serial.steps.front().loss) << "the tiny model should learn in 5 steps";
  // Two pretend nodes when the world is even: the grid spans "nodes" as it would under Slurm.
  const int nodes_sim = layout.world() % 2 == 0 ? 2 : 1;
  const TrainedRun run = train(dir_ / "run", layout.world(), GetParam(), 5, 0, nodes_sim);
  expect_same_run(run, serial, GetParam());
  EXPECT_TRUE(contains(run.summary, "\"comm_bytes_match\": true")) << run.summary;
  EXPECT_TRUE(contains(run.summary, "\"layout\": \"" + format_layout(layout))) << run.summary;
}

// Every factorization of 2, 4 and 8 into data x X x Y x Z, plus orders other than xyzd.
std::vector<std::string> all_layouts() {
  std::vector<std::string> out;
  for (int world : {2, 4, 8})
    for (int d = 1; d <= world; d *= 2)
      for (int x = 1; d * x <= world; x *= 2)
        for (int y = 1; d * x * y <= world; y *= 2) {
          const int z = world / (d * x * y);
          out.push_back(std::to_string(d) + "x" + std::to_string(x) + "x" + std::to_string(y) + "x" +
                        std::to_string(z));
        }
  for (const char* ordered : {"2x2x1x2:zyxd", "1x2x2x2:dzyx", "2x1x2x1:ydxz"}) out.push_back(ordered);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOfWorlds248, TrainLayouts, ::testing::ValuesIn(all_layouts()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             if (c == ':') c = '_';
                           return name;
                         });

// training.overlap_comm (on by default) moves the z all-gathers and the data all-reduce
// beside compute but keeps every collective and its order: the same bits with it off, and
// the same counted bytes.
TEST(TrainOverlap, OffAndOnGiveTheSameBits) {
  const auto dir = fresh_dir("overlap");
  const TrainedRun on = train(dir / "on", 8, "2x2x1x2", 3, 0, 2);
  const TrainedRun off = train(dir / "off", 8, "2x2x1x2", 3, 0, 2, "training.overlap_comm=false");
  ASSERT_EQ(off.steps.size(), 3u);
  ASSERT_EQ(on.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(on.steps[i].loss, off.steps[i].loss) << "step " << i + 1;
  expect_same_tensors(on.tensors, off.tensors, 0.0f, "overlap on vs off");
  for (const TrainedRun* run : {&on, &off}) {
    EXPECT_TRUE(contains(run->summary, "\"comm_bytes_match\": true")) << run->summary;
    // The collectives overlap moves, each with its counted time per step.
    const std::string times = run->summary.substr(run->summary.find("\"comm_seconds_per_step\""));
    for (const char* key : {"\"z.all_gather\": ", "\"z.reduce_scatter\": ", "\"data.all_reduce\": "})
      EXPECT_TRUE(contains(times.substr(0, times.find('}')), key)) << key << " in " << run->summary;
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

class TrainResume : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("resume"); }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(TrainResume, SavedAt2x2x1x2ContinuesAtOtherLayoutsAndWorldSizes) {
  const TrainedRun full = train(dir_ / "full", 8, "2x2x1x2", 6, 3);
  ASSERT_EQ(full.steps.size(), 6u);
  for (const char* layout : {"1x1x2x2", "3x1x1x1", "1x1x1x1", "2x2x1x2"}) {
    const auto dir = copy_checkpoint_step(dir_ / "full", 3, dir_ / (std::string("resume-") + layout));
    const TrainedRun resumed = train(dir, parse_layout(layout).world(), layout, 6, 3);
    ASSERT_EQ(resumed.steps.size(), 3u) << layout << ": steps 4-6 only";
    for (size_t i = 0; i < 3; ++i) {
      const StepLine& want = full.steps[3 + i];
      EXPECT_EQ(resumed.steps[i].step, want.step) << layout;
      EXPECT_NEAR(resumed.steps[i].loss, want.loss, kLossTolerance) << layout << " step " << want.step;
      // The cursor continues: no sample skipped or repeated.
      EXPECT_EQ(resumed.steps[i].data_cursor, want.data_cursor) << layout;
    }
    EXPECT_TRUE(contains(resumed.summary, "\"start_step\": 3")) << resumed.summary;
    TrainedRun want = full;
    want.steps.erase(want.steps.begin(), want.steps.begin() + 3);
    expect_same_run(resumed, want, std::string("resumed at ") + layout);
  }
}

TEST_F(TrainResume, ACheckpointOfAnotherModelIsRefusedByName) {
  train(dir_ / "a", 1, "1x1x1x1", 2, 0);
  std::string job = tiny_job(4, 0);
  job.replace(job.find("heads = 8"), 9, "heads = 4");  // same tensor shapes, another model
  write_file(dir_ / "a" / "job.toml", job);
  const CommandResult r = run_train(dir_ / "a", 1, "1x1x1x1");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(contains(r.output, "heads=8")) << r.output;
  EXPECT_TRUE(contains(r.output, "heads=4")) << r.output;
}

TEST_F(TrainResume, PreemptionSavesAtOneStepBoundaryAndTheRerunEndsLikeAnUninterruptedRun) {
  const TrainedRun full = train(dir_ / "full", 4, "2x1x1x2", 12, 0);
  ASSERT_EQ(full.steps.size(), 12u);

  const auto dir = dir_ / "preempted";
  std::filesystem::create_directories(dir);
  write_file(dir / "job.toml", tiny_job(12, 0));
  // SIGUSR1 to the launcher once the first steps are logged; it forwards to every rank.
  std::thread signaller([&] {
    for (int i = 0; i < 600; ++i) {
      if (read_metrics(dir / "run").size() >= 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    run_command("pkill -USR1 -f \"" + launcher_pattern(dir, 4) + "\"");
  });
  const CommandResult stopped = run_train(dir, 4, "2x1x1x2");
  signaller.join();
  ASSERT_EQ(stopped.code, 75) << "preempted runs exit with 75 (EX_TEMPFAIL)\n" << stopped.output;
  const auto before = read_metrics(dir / "run");
  ASSERT_GE(before.size(), 2u);
  ASSERT_LT(before.size(), 12u) << "the signal came too late to test anything";
  EXPECT_TRUE(contains(stopped.output, "stop requested")) << stopped.output;
  EXPECT_EQ(read_text(dir / "ckpt" / "latest"), "step-" + std::string(9 - std::to_string(before.size()).size(), '0') +
                                                    std::to_string(before.size()) + "\n");

  const CommandResult rerun = run_train(dir, 2, "1x1x2x1");  // resumed on fewer ranks
  ASSERT_EQ(rerun.code, 0) << rerun.output;
  TrainedRun resumed;
  resumed.steps = read_metrics(dir / "run");  // the same file, continued
  resumed.tensors = read_tensors(dir / "ckpt");
  expect_same_run(resumed, full, "preempted and resumed");
}

TEST_F(TrainResume, AFlippedByteStopsTheResumeUnlessFallbackWhichAllRanksAgreeOn) {
  const TrainedRun full = train(dir_ / "full", 4, "1x2x2x1", 6, 2);
  ASSERT_EQ(full.steps.size(), 6u);
  // Steps 2 and 4 of that run, with a byte of one wte rectangle flipped in step 4: only the
  // ranks that own that rectangle see the damage, the others would load step 4.
  const auto dir = dir_ / "damaged";
  std::filesystem::create_directories(dir / "ckpt");
  for (const char* step : {"step-000000002", "step-000000004"})
    std::filesystem::copy(dir_ / "full" / "ckpt" / step, dir / "ckpt" / step, std::filesystem::copy_options::recursive);
  write_file(dir / "ckpt" / "latest", "step-000000004\n");
  write_file(dir / "job.toml", tiny_job(6, 2));
  const StoredRect source = CheckpointReader(dir / "ckpt" / "step-000000004").tensor("wte").sources.at(1);
  flip_stored_byte(dir / "ckpt" / "step-000000004", "wte", source);

  const CommandResult refused = run_train(dir, 4, "1x2x2x1");
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_TRUE(contains(refused.output, source.file)) << refused.output;
  EXPECT_TRUE(contains(refused.output, "wte")) << refused.output;
  EXPECT_TRUE(contains(refused.output, "checksum")) << refused.output;

  const CommandResult resumed = run_train(dir, 4, "1x2x2x1", "--fallback");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "FELL BACK")) << resumed.output;
  EXPECT_TRUE(contains(read_text(dir / "run" / "summary.json"), "\"start_step\": 2")) << resumed.output;
  const auto steps = read_metrics(dir / "run");
  ASSERT_EQ(steps.size(), 4u) << "steps 3-6, every rank from step 2";
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, full.steps[2 + i].step);
    EXPECT_NEAR(steps[i].loss, full.steps[2 + i].loss, kLossTolerance) << "step " << steps[i].step;
  }
}

TEST_F(TrainResume, ALayoutThatDoesNotFitIsABadInputNamingWhatIsWrong) {
  write_file(dir_ / "job.toml", tiny_job(2, 0));
  const CommandResult product = run_train(dir_, 4, "3x1x1x1");
  EXPECT_EQ(product.code, 2) << product.output;
  EXPECT_TRUE(contains(product.output, "layout 3x1x1x1 (AXONN_LAYOUT) has 3 ranks but the job has 4"))
      << product.output;
  const CommandResult divides = run_train(dir_, 3, "1x3x1x1");
  EXPECT_EQ(divides.code, 2) << divides.output;
  EXPECT_TRUE(contains(divides.output, "hidden=32 is not divisible by G_x*G_z=3")) << divides.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "metrics.jsonl")) << "nothing may start";
}

}  // namespace
}  // namespace axonn::test
