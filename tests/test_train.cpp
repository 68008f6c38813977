// `axonn train` as users run it: real processes under the local launcher, real Gloo, real
// checkpoints. The defining tests of the 4D trainer:
// - every layout of 1, 2, 4 and 8 ranks trains 5 steps to the serial run's losses and final
//   weights, and every rank's counted bytes equal the layout model's;
// - a run saved at one layout resumes at others (world 3 included) and continues exactly;
// - a preemption signal stops every rank at one step boundary with a committed checkpoint,
//   and the resumed run ends where an uninterrupted one does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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

TrainedRun train(const std::filesystem::path& dir, int ranks, const std::string& layout, int steps, int interval,
                 int nodes_sim = 1, const std::string& overrides = "") {
  return train_in(dir, tiny_job(steps, interval), ranks, layout, overrides, nodes_sim);
}

void expect_same_run(const TrainedRun& got, const TrainedRun& want, const std::string& what) {
  expect_same_run(got, want, kLossTolerance, kWeightTolerance, what);
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
    // The log says whether the state was resharded, from which layout to which, and what it read.
    const std::string said = std::string(layout) == "2x2x1x2"
                                 ? "checkpoint: same layout 2x2x1x2:"
                                 : "checkpoint: resharded from layout 2x2x1x2:";
    EXPECT_TRUE(contains(resumed.output, said)) << resumed.output;
    EXPECT_TRUE(std::regex_search(resumed.output, std::regex("read [0-9.]+ MiB of shards for the [0-9.]+ MiB the ranks "
                                                             "hold")))
        << resumed.output;
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
  // SIGUSR1 to the launcher once the first steps are logged; it forwards to every rank. The
  // run's 12 steps take ~0.15 s here, less than starting pkill may; rank 0 sleeps 40 ms per
  // step (a test-only slowdown that changes no number), so the signal lands mid-run.
  setenv("AXONN_TEST_SLOW_RANK", "0:40", 1);
  std::thread signaller([&] {
    for (int i = 0; i < 600; ++i) {
      if (read_metrics(dir / "run").size() >= 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    run_command("pkill -USR1 -f \"" + launcher_pattern(dir, 4) + "\"");
  });
  const CommandResult stopped = run_train(dir, 4, "2x1x1x2");
  signaller.join();
  unsetenv("AXONN_TEST_SLOW_RANK");
  ASSERT_EQ(stopped.code, 75) << "preempted runs exit with 75 (EX_TEMPFAIL)\n" << stopped.output;
  const auto before = read_metrics(dir / "run");
  ASSERT_GE(before.size(), 2u);
  ASSERT_LT(before.size(), 12u) << "the signal came too late to test anything";
  EXPECT_TRUE(contains(stopped.output, "stop requested")) << stopped.output;
  EXPECT_EQ(read_text(dir / "ckpt" / "latest"), "step-" + std::string(9 - std::to_string(before.size()).size(), '0') +
                                                    std::to_string(before.size()) + "\n");

  const CommandResult rerun = run_train(dir, 2, "1x1x2x1");  // resumed on fewer ranks
  ASSERT_EQ(rerun.code, 0) << rerun.output;
  const TrainedRun resumed = read_run(dir);  // the same metrics.jsonl, continued
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

// Data the job cannot train on, through `axonn run` as a user meets it: an empty file, one
// shorter than a global batch of samples, a token outside model.vocab (text: one token per
// byte, so 'z' = 122 is outside a vocabulary of 100). Each is exit 2 with one line naming the
// file and the fix, before any rank starts or writes a metric.
TEST_F(TrainResume, EmptyShortOrOutOfVocabularyDataIsABadInputBeforeAnyRankStarts) {
  struct Case {
    const char* name;
    std::string text;
    const char* settings;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"empty", "", "", "is empty (0 bytes); point data.path at a non-empty file"},
      {"short", std::string(100, 'a'), "", "fewer than one global batch of 24 samples; use a longer file"},
      {"oov", std::string(24 * 16 + 1, 'a') + "z", "model.vocab=100",
       "has token id 122 at position 385, outside the model's vocabulary [0, 100)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto dir = dir_ / c.name;
    std::filesystem::create_directories(dir);
    write_file(dir / "job.toml", tiny_job(2, 0));
    write_file(dir / "data.txt", c.text);
    const CommandResult r =
        run_train(dir, 2, "2x1x1x1", "data.path=" + (dir / "data.txt").string() + " data.format=text " + c.settings);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(contains(r.output, (dir / "data.txt").string())) << r.output;
    EXPECT_TRUE(contains(r.output, c.says)) << r.output;
    EXPECT_FALSE(contains(r.output, "[0] ")) << "no rank may start:\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "run" / "metrics.jsonl"));
  }
}

// The stop signals as a wrapper sends them: SIGTERM to the launcher, and a job's own
// run.preempt_signal. Each run is the tiny job on 2 ranks, signalled once 2 steps are logged.
class TrainSignals : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("signals"); }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  // Trains `job` in dir_/name on 2 ranks and sends `signal` to the launcher after step 2.
  CommandResult signalled_run(const std::string& name, const std::string& job, const std::string& signal) {
    const auto dir = dir_ / name;
    std::filesystem::create_directories(dir);
    write_file(dir / "job.toml", job);
    std::thread signaller([&] {
      for (int i = 0; i < 600 && read_metrics(dir / "run").size() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      run_command("pkill -" + signal + " -f \"" + launcher_pattern(dir, 2) + "\"");
    });
    const CommandResult r = run_train(dir, 2, "2x1x1x1");
    signaller.join();
    return r;
  }
  std::filesystem::path dir_;
};

// SIGTERM to `axonn run`, or SIGINT (Ctrl-C at a terminal): every rank commits its step and
// exits 75, and so does the launcher (not 143 or 130), as srun would, so a wrapper requeues.
TEST_F(TrainSignals, SigtermOrSigintToTheLauncherSavesAndTheLauncherExitsSeventyFive) {
  for (const std::string signal : {"TERM", "INT"}) {
    SCOPED_TRACE("SIG" + signal);
    const CommandResult r = signalled_run(signal, tiny_job(200, 0), signal);
    ASSERT_EQ(r.code, 75) << r.output;
    const auto steps = read_metrics(dir_ / signal / "run");
    ASSERT_LT(steps.size(), 200u) << "the signal came too late to test anything";
    EXPECT_TRUE(contains(r.output, "stop requested")) << r.output;
    EXPECT_TRUE(contains(r.output, "axonn run: every rank exited with 75")) << r.output;
    EXPECT_EQ(read_text(dir_ / signal / "ckpt" / "latest"), "step-" +
                                                                std::string(9 - std::to_string(steps.size()).size(), '0') +
                                                                std::to_string(steps.size()) + "\n");
  }
}

// run.preempt_signal = "USR2" or "HUP" (the default, USR1, stops TrainResume's run above): it stops
// the run at a step boundary with a checkpoint.
TEST_F(TrainSignals, AJobsPreemptSignalUsr2OrHupStopsItWithACheckpoint) {
  for (const std::string signal : {"USR2", "HUP"}) {
    SCOPED_TRACE("SIG" + signal);
    const CommandResult r = signalled_run(signal, tiny_job(200, 0) + "preempt_signal = \"" + signal + "\"\n", signal);
    ASSERT_EQ(r.code, 75) << r.output;
    EXPECT_TRUE(contains(r.output, "[0] [info] stop signals: SIG" + signal + " (run.preempt_signal), SIGTERM, SIGINT"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "stop requested")) << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir_ / signal / "ckpt" / "latest")) << r.output;
  }
}

// What the sbatch templates forward: the job's key, else the site's policy, with overrides
// applied; anything but USR1, USR2 and HUP is bad input.
TEST_F(TrainSignals, PrintPreemptSignalFollowsTheJobTheSiteAndOverrides) {
  write_file(dir_ / "job.toml", tiny_job(2, 0));
  write_file(dir_ / "usr2.toml", tiny_job(2, 0) + "preempt_signal = \"USR2\"\n");
  write_file(dir_ / "site.toml", "[site]\nname = \"hup-site\"\n[policy]\npreempt_signal = \"HUP\"\n");
  auto print = [&](const std::string& args) {
    return run_command("env -u PMIX_NAMESPACE -u AXONN_SITE_CONFIG " + kAxonn + " train --print-preempt-signal " +
                       args);
  };
  EXPECT_EQ(print((dir_ / "job.toml").string()).output, "USR1\n");
  EXPECT_EQ(print((dir_ / "usr2.toml").string()).output, "USR2\n");
  EXPECT_EQ(print((dir_ / "job.toml").string() + " --site " + (dir_ / "site.toml").string()).output, "HUP\n");
  EXPECT_EQ(print((dir_ / "usr2.toml").string() + " --site " + (dir_ / "site.toml").string()).output, "USR2\n");
  EXPECT_EQ(print((dir_ / "usr2.toml").string() + " run.preempt_signal=HUP").output, "HUP\n");
  const auto bad = print((dir_ / "job.toml").string() + " run.preempt_signal=TERM");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "run.preempt_signal")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "\"USR1\", \"USR2\", \"HUP\"")) << bad.output;
}

// A wrapper that forwards another signal than the job stops on (AXONN_PREEMPT_SIGNAL, which
// the templates set) would lose the checkpoint at the time limit: refused before any rank
// starts, under axonn run and in axonn train itself.
TEST_F(TrainSignals, AWrapperForwardingAnotherSignalIsRefusedBeforeTraining) {
  write_file(dir_ / "job.toml", tiny_job(2, 0) + "preempt_signal = \"USR2\"\n");
  const std::string says =
      "AXONN_PREEMPT_SIGNAL=USR1 (the signal this job\'s wrapper or sbatch template forwards) is not the job\'s "
      "run.preempt_signal \"USR2\"";
  const auto run =
      run_command("cd " + dir_.string() + " && AXONN_PREEMPT_SIGNAL=USR1 " + kAxonn + " run -n 2 job.toml");
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_TRUE(contains(run.output, says)) << run.output;
  EXPECT_FALSE(contains(run.output, "[0] ")) << run.output;
  const auto train =
      run_command("cd " + dir_.string() + " && AXONN_PREEMPT_SIGNAL=SIGUSR1 " + kAxonn + " train job.toml");
  EXPECT_EQ(train.code, 2) << train.output;
  EXPECT_TRUE(contains(train.output, "AXONN_PREEMPT_SIGNAL=SIGUSR1 (the signal")) << train.output;
  const auto same =
      run_command("cd " + dir_.string() + " && AXONN_PREEMPT_SIGNAL=USR2 " + kAxonn + " run -n 1 job.toml");
  EXPECT_EQ(same.code, 0) << same.output;
}

// --site and AXONN_SITE_CONFIG both set: the flag wins, and rank 0's first line says which
// site it used and that the variable was not.
TEST(TrainSite, AnExplicitSiteWinsOverTheEnvironmentAndRankZeroSaysSoFirst) {
  const auto dir = fresh_dir("site");
  write_file(dir / "job.toml", tiny_job(2, 0));
  write_file(dir / "flag.toml", "[site]\nname = \"flag-site\"\n");
  write_file(dir / "env.toml", "[site]\nname = \"env-site\"\n");
  auto first_line_of_rank0 = [](const std::string& output) {
    const size_t at = output.find("[0] ");
    return at == std::string::npos ? std::string() : output.substr(at, output.find('\n', at) - at);
  };
  const std::string env = "AXONN_SITE_CONFIG=" + (dir / "env.toml").string() + " ";
  const auto both = run_command("cd " + dir.string() + " && " + env + kAxonn + " run -n 1 job.toml --site " +
                                (dir / "flag.toml").string());
  ASSERT_EQ(both.code, 0) << both.output;
  EXPECT_EQ(first_line_of_rank0(both.output),
            "[0] [info] site flag-site from --site " + (dir / "flag.toml").string() +
                "; AXONN_SITE_CONFIG=" + (dir / "env.toml").string() +
                " (the axonn SPANK plugin\'s site config, or your environment\'s) is not used: an explicit --site wins")
      << both.output;
  EXPECT_TRUE(contains(both.output, "1 ranks on 1 node(s), site flag-site,")) << both.output;

  const auto from_env = run_command("cd " + dir.string() + " && " + env + kAxonn + " run -n 1 job.toml");
  ASSERT_EQ(from_env.code, 0) << from_env.output;
  EXPECT_EQ(first_line_of_rank0(from_env.output),
            "[0] [info] site env-site from AXONN_SITE_CONFIG=" + (dir / "env.toml").string() +
                " (set by the axonn SPANK plugin or your environment; --site would take precedence)")
      << from_env.output;
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace axonn::test
