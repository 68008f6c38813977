// The optimizer sharded over data (training.shard_optimizer) in `axonn train` as users run
// it: real processes under the local launcher, real Gloo, real checkpoints.
// - at layouts of 2, 4 and 8 ranks with G_data >= 2, the sharded optimizer trains to the bits
//   of the unsharded one (losses and final weights and moments) without clipping, in every
//   recompute mode, with overlap off and on, and within the stated bound with clipping; every
//   rank counts the layout model's bytes (reduce-scatters and all-gathers over data);
// - a checkpoint saved sharded resumes unsharded, at another G_data and world size, and back,
//   with the losses of an uninterrupted run;
// - "auto" shards where that is what makes the layout fit and says why; each rank's measured
//   peak memory tracks the layout model's prediction in both modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <regex>

#include "layout/layout_memory.hpp"
#include "layout/model_plan.hpp"
#include "train_helpers.hpp"

namespace axonn::test {
namespace {

// `job` trained in `dir` at `layout`, on two pretend nodes where the world is even.
TrainedRun train(const std::filesystem::path& dir, const std::string& job, int ranks, const std::string& layout,
                 const std::string& overrides) {
  return train_in(dir, job, ranks, layout, overrides, ranks % 2 == 0 ? 2 : 1, 300);
}

// Across layouts the gradients are summed in other groupings (test_train's bounds).
constexpr double kLossTolerance = 2e-5;
constexpr float kWeightTolerance = 2e-5f;

// The tiny job without clipping: the weights then do not depend on the gradient norm, whose
// squares the sharded optimizer adds in other groups.
const char* const kNoClip = " training.grad_clip=0";

std::string shard_setting(bool shard) { return std::string(" training.shard_optimizer=") + (shard ? "true" : "false"); }

class TrainShard : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_P(TrainShard, TrainsToTheBitsOfTheUnshardedOptimizer) {
  const Layout layout = parse_layout(GetParam());
  ASSERT_GE(layout.data, 2);
  dir_ = fresh_dir("shard-" + format_layout(layout));
  const std::string job = tiny_job(3, 0);
  const int world = layout.world();
  const TrainedRun plain = train(dir_ / "plain", job, world, GetParam(), shard_setting(false) + kNoClip);
  ASSERT_EQ(plain.steps.size(), 3u);
  EXPECT_TRUE(contains(plain.summary, "\"shard_optimizer\": false")) << plain.summary;
  EXPECT_TRUE(contains(plain.output, "train: optimizer state unsharded (training.shard_optimizer = false)"))
      << plain.output;
  const std::pair<bool, const char*> variants[] = {
      {true, "none"}, {false, "none"}, {true, "block"}, {false, "attention"}};
  for (const auto& [overlap, recompute] : variants) {
    const std::string overrides = shard_setting(true) + kNoClip +
                                  " training.overlap_comm=" + (overlap ? "true" : "false") +
                                  " training.recompute=" + recompute;
    const std::string name = std::string("sharded-") + recompute + (overlap ? "-overlap" : "");
    const TrainedRun run = train(dir_ / name, job, world, GetParam(), overrides);
    expect_same_run(run, plain, 0, 0.0f, GetParam() + overrides);
    EXPECT_TRUE(contains(run.summary, "\"shard_optimizer\": true")) << run.summary;
    // Every rank's counted bytes, the data axis's reduce-scatters and all-gathers included,
    // are the layout model's.
    EXPECT_TRUE(contains(run.summary, "\"comm_bytes_match\": true")) << run.summary;
    EXPECT_TRUE(
        contains(run.output, "train: optimizer state sharded over the " + std::to_string(layout.data) + " data ranks"))
        << run.output;
    EXPECT_TRUE(contains(run.output, "data: all_gather ")) << run.output;
    EXPECT_FALSE(contains(run.output, "data: all_reduce")) << run.output;
  }
  // With the job's clipping (1.0, below these steps' norms), the clip scale follows the
  // norm's rounding: the weights within steps * lr * 4 * gamma(P), P the parameters
  // (test_trainer_model derives it), and the losses with them.
  const TrainedRun clipped = train(dir_ / "clipped", job, world, GetParam(), shard_setting(false));
  const TrainedRun clipped_sharded = train(dir_ / "clipped-sharded", job, world, GetParam(), shard_setting(true));
  const double u = std::ldexp(1.0, -24);
  const double P = static_cast<double>(parameters_total({2, 32, 8, 256, 16}));
  const double weight_bound = 3 * 1e-2 * 4 * (P * u / (1 - P * u));
  expect_same_run(clipped_sharded, clipped, kLossTolerance, static_cast<float>(weight_bound), GetParam() + " clipped");
  EXPECT_EQ(clipped_sharded.steps.front().loss, clipped.steps.front().loss) << "the first loss precedes any update";
}

// G_data = 2 on 2 ranks; 2 and 4 on 4 ranks with z splitting the weights beside them; 8 ranks
// with every tensor axis but y split.
INSTANTIATE_TEST_SUITE_P(Worlds248, TrainShard, ::testing::Values("2x1x1x1", "2x1x1x2", "4x1x1x1", "2x2x1x2"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) { return param_info.param; });

// Moments are one global tensor each in every mode: a checkpoint saved with the optimizer
// sharded resumes unsharded, at another G_data and world size, and one saved unsharded
// resumes sharded; the resumed runs continue as the uninterrupted ones (bit for bit at the
// same layout, within test_train's bounds at another).
TEST(TrainShardResume, SavedShardedResumesUnshardedAtOtherSizesAndBack) {
  const auto dir = fresh_dir("shard-resume");
  const std::string job = tiny_job(6, 3);
  const TrainedRun sharded = train(dir / "sharded", job, 4, "2x1x1x2", shard_setting(true) + kNoClip);
  ASSERT_EQ(sharded.steps.size(), 6u);
  TrainedRun want = sharded;
  want.steps.erase(want.steps.begin(), want.steps.begin() + 3);  // steps 4-6
  struct Resume {
    const char* layout;
    bool shard;
    bool same_bits;
  };
  for (const Resume& r : {Resume{"2x1x1x2", false, true}, Resume{"3x1x1x1", true, false},
                          Resume{"1x2x1x1", false, false}, Resume{"4x1x1x2", true, false}}) {
    const std::string what =
        std::string("saved sharded at 2x1x1x2, resumed at ") + r.layout + (r.shard ? " sharded" : " unsharded");
    const auto to = copy_checkpoint_step(dir / "sharded", 3, dir / (std::string("from-sharded-") + r.layout));
    const TrainedRun resumed =
        train(to, job, parse_layout(r.layout).world(), r.layout, shard_setting(r.shard) + kNoClip);
    EXPECT_TRUE(contains(resumed.summary, "\"start_step\": 3")) << resumed.summary;
    EXPECT_TRUE(contains(resumed.summary, std::string("\"shard_optimizer\": ") + (r.shard ? "true" : "false")));
    expect_same_run(resumed, want, r.same_bits ? 0 : kLossTolerance, r.same_bits ? 0.0f : kWeightTolerance, what);
  }
  // And back: saved unsharded, resumed sharded at the same layout and at another world size.
  const TrainedRun plain = train(dir / "plain", job, 2, "2x1x1x1", shard_setting(false) + kNoClip);
  TrainedRun plain_want = plain;
  plain_want.steps.erase(plain_want.steps.begin(), plain_want.steps.begin() + 3);
  for (const Resume& r : {Resume{"2x1x1x1", true, true}, Resume{"4x1x1x2", true, false}}) {
    const std::string what = std::string("saved unsharded at 2x1x1x1, resumed sharded at ") + r.layout;
    const auto to = copy_checkpoint_step(dir / "plain", 3, dir / (std::string("from-plain-") + r.layout));
    const TrainedRun resumed = train(to, job, parse_layout(r.layout).world(), r.layout, shard_setting(true) + kNoClip);
    expect_same_run(resumed, plain_want, r.same_bits ? 0 : kLossTolerance, r.same_bits ? 0.0f : kWeightTolerance, what);
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

// A model whose optimizer state dominates a rank's training memory (4 layers, hidden 256:
// 3.2M parameters, 12.8 MiB per float32 copy; 16 tokens per micro-batch), on 2 ranks at
// 2x1x1x1. Two sites, with the memory per rank above the unsharded prediction and between the
// sharded and unsharded ones (the layout model's, computed here as the trainer does), make
// "auto" leave the optimizer unsharded, then shard it (and not recompute); the run says
// which and why. In each mode every rank's measured peak (RSS above the process's memory
// before the model existed) exceeds the prediction by the process's own buffers (the same in
// both modes), and the measured saving is the predicted one: half the moments, less the
// checkpoint staging's difference (the predicted figure includes what a save copies).
TEST(TrainShardMemory, AutoShardsWhenThatMakesItFitAndMeasuredMemoryTracksThePrediction) {
  const auto dir = fresh_dir("shard-memory");
  const std::string job =
      "[model]\nlayers = 4\nhidden = 256\nheads = 4\nvocab = 256\nsequence = 16\n"
      "[training]\nglobal_batch = 2\nmicro_batch = 1\nsteps = 2\nseed = 3\ndevice = \"cpu\"\n"
      "[checkpoint]\ndir = \"ckpt\"\n[run]\ndir = \"run\"\n";
  const Layout layout = parse_layout("2x1x1x1");
  ChooserInput plan;
  plan.model = {4, 256, 4, 256, 16};
  plan.batch = {2, 1, ElementType::float32};
  const double plain_need = static_cast<double>(estimate_memory(plan, layout, {Recompute::none, false}).total());
  const double sharded_need = static_cast<double>(estimate_memory(plan, layout, {Recompute::none, true}).total());
  ASSERT_GT(plain_need, sharded_need);
  const std::map<bool, double> site_memory = {{false, plain_need * 1.05}, {true, (plain_need + sharded_need) / 2}};

  constexpr double kMiB = 1048576.0;
  std::map<bool, std::vector<double>> measured, predicted;
  for (bool shard : {false, true}) {
    const std::string name = shard ? "sharded" : "unsharded";
    const auto run_dir = dir / name;
    std::filesystem::create_directories(run_dir);
    char gib[64];
    std::snprintf(gib, sizeof gib, "%.9f", site_memory.at(shard) / (1024.0 * kMiB));
    write_file(run_dir / "site.toml",
               std::string("[site]\nname = \"small\"\n[node]\ngpus_per_node = 2\nmemory_gib = ") + gib +
                   "\n[policy]\nmemory_headroom = 0\n");
    const TrainedRun run = train(run_dir, job, 2, "2x1x1x1", "--site " + (run_dir / "site.toml").string());
    EXPECT_TRUE(contains(run.summary, std::string("\"shard_optimizer\": ") + (shard ? "true" : "false")))
        << run.summary;
    EXPECT_TRUE(contains(run.summary, "\"recompute\": \"none\"")) << run.summary;
    EXPECT_TRUE(contains(run.output, shard ? "(auto: on: at recompute none the optimizer unsharded needs "
                                           : "(auto: off: unsharded fits at recompute none"))
        << run.output;
    EXPECT_TRUE(contains(run.summary, "\"comm_bytes_match\": true")) << run.summary;
    measured[shard] = summary_numbers(run.summary, "model_memory_bytes");
    predicted[shard] = summary_numbers(run.summary, "predicted_memory_bytes");
    ASSERT_EQ(measured[shard].size(), 2u) << run.summary;
    ASSERT_EQ(predicted[shard].size(), 2u) << run.summary;
    for (size_t r = 0; r < 2; ++r)
      std::cout << "[ measured ] " << name << " rank " << r << ": peak " << measured[shard][r] / kMiB
                << " MiB for training, predicted " << predicted[shard][r] / kMiB << " MiB\n";
  }
  if (kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer build: its own memory is in the RSS, bounds not checked";
  for (size_t r = 0; r < 2; ++r) {
    for (bool shard : {false, true}) {
      const double over = measured[shard][r] - predicted[shard][r];
      EXPECT_GT(over, -0.05 * predicted[shard][r]) << shard << " rank " << r << ": the model overcounts";
      EXPECT_LT(over, 32 * kMiB) << shard << " rank " << r << ": more than the process's own buffers";
    }
    const double saved = measured[false][r] - measured[true][r];
    const double saving = predicted[false][r] - predicted[true][r];
    std::cout << "[ measured ] rank " << r << ": sharding saves " << saved / kMiB << " MiB, predicted " << saving / kMiB
              << " MiB\n";
    EXPECT_NEAR(saved, saving, 0.05 * saving + 2 * kMiB) << "rank " << r;
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace axonn::test
