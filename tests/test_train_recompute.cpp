// Activation recomputation (training.recompute) in `axonn train` as users run it: real
// processes under the local launcher, real Gloo, real checkpoints.
// - every mode trains, at layouts of 2, 4 and 8 ranks, to the same bits (losses and final
//   weights) as the run that keeps every activation, and counts the layout model's bytes;
// - a checkpoint saved in one mode resumes in another and continues exactly;
// - "auto" takes the least recomputation that fits the site's memory and says why; each
//   rank's measured peak memory tracks the layout model's prediction in every mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <regex>

#include "layout/layout_memory.hpp"
#include "train_helpers.hpp"

namespace axonn::test {
namespace {

// `job` trained in `dir` at `layout`, on two pretend nodes where the world is even.
TrainedRun train(const std::filesystem::path& dir, const std::string& job, int ranks, const std::string& layout,
                 const std::string& overrides) {
  return train_in(dir, job, ranks, layout, overrides, ranks % 2 == 0 ? 2 : 1, 300);
}

// The same losses, step for step, and the same weights, bit for bit.
void expect_same_bits(const TrainedRun& got, const TrainedRun& want, const std::string& what) {
  expect_same_run(got, want, 0, 0.0f, what);
}

// The tiny job with three layers: under block recomputation with overlap, blocks 0 and 2
// take turns on one set of gathered weights.
std::string three_layer_job(int steps, int interval) {
  std::string job = tiny_job(steps, interval);
  job.replace(job.find("layers = 2"), 10, "layers = 3");
  return job;
}

class TrainRecompute : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_P(TrainRecompute, EveryModeTrainsToTheBitsOfNoRecomputation) {
  const Layout layout = parse_layout(GetParam());
  dir_ = fresh_dir("recompute-" + format_layout(layout));
  const std::string job = three_layer_job(3, 0);
  const TrainedRun kept = train(dir_ / "none", job, layout.world(), GetParam(), "training.recompute=none");
  ASSERT_EQ(kept.steps.size(), 3u);
  EXPECT_TRUE(contains(kept.summary, "\"recompute\": \"none\"")) << kept.summary;
  for (const char* mode : {"attention", "block"}) {
    const TrainedRun run =
        train(dir_ / mode, job, layout.world(), GetParam(), std::string("training.recompute=") + mode);
    expect_same_bits(run, kept, GetParam() + " recompute " + mode);
    EXPECT_TRUE(contains(run.summary, std::string("\"recompute\": \"") + mode + "\"")) << run.summary;
    // Every rank's counted bytes, the rerun collectives included, are the layout model's.
    EXPECT_TRUE(contains(run.summary, "\"comm_bytes_match\": true")) << run.summary;
    EXPECT_TRUE(contains(run.output, std::string("train: recompute ") + mode + " (training.recompute = " + mode +
                                         "): the backward reruns 2 block(s) per micro-batch"))
        << run.output;
  }
}

// A layout of each world size with z > 1 (gathered weights) and the other axes split.
INSTANTIATE_TEST_SUITE_P(Worlds248, TrainRecompute, ::testing::Values("1x1x1x2", "1x2x1x2", "2x1x2x2"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) { return param_info.param; });

// Checkpoints hold parameters, moments and the data cursor, never activations: a run saved
// in one mode continues in another exactly as it would have in the first.
TEST(TrainRecomputeResume, ACheckpointSavedInOneModeResumesInAnother) {
  const auto dir = fresh_dir("recompute-resume");
  const std::string job = three_layer_job(6, 3);
  const TrainedRun full = train(dir / "full", job, 4, "1x2x1x2", "training.recompute=none");
  ASSERT_EQ(full.steps.size(), 6u);
  TrainedRun want = full;
  want.steps.erase(want.steps.begin(), want.steps.begin() + 3);  // steps 4-6
  for (const char* mode : {"block", "attention"}) {
    const auto resumed_dir = copy_checkpoint_step(dir / "full", 3, dir / (std::string("resume-") + mode));
    write_file(resumed_dir / "job.toml", job);
    const TrainedRun resumed = train(resumed_dir, job, 4, "1x2x1x2", std::string("training.recompute=") + mode);
    EXPECT_TRUE(contains(resumed.summary, "\"start_step\": 3")) << resumed.summary;
    expect_same_bits(resumed, want, std::string("saved with none, resumed with ") + mode);
  }
  // And the other way: saved with block, resumed without recomputation.
  const TrainedRun blocked = train(dir / "block-full", job, 4, "1x2x1x2", "training.recompute=block");
  expect_same_bits(blocked, full, "block, uninterrupted");
  const auto back = copy_checkpoint_step(dir / "block-full", 3, dir / "resume-none");
  expect_same_bits(train(back, job, 4, "1x2x1x2", "training.recompute=none"), want,
                   "saved with block, resumed with none");
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

// A model whose activations dominate a rank's training memory (8 layers, hidden 128, 1024
// tokens per micro-batch: ~8 MiB of activations per block), on 2 ranks at 1x1x1x2 so the
// gathered weights count too. Three sites, each with the memory per rank between two modes'
// predictions (the layout model's, computed here as the trainer does), make "auto" keep
// everything, drop the attention's intermediates, or keep only the blocks' inputs; the run
// says which and why. In each mode every rank's measured peak (RSS above the process's
// memory before the model existed) exceeds the prediction by the process's own buffers (the
// allocator's, Gloo's, HDF5's, logging: ~12 to 17 MiB measured on the CI machine, the same in
// every mode), and the measured saving of each mode against none is the predicted one.
TEST(TrainRecomputeMemory, AutoTakesTheLeastThatFitsAndMeasuredMemoryTracksThePrediction) {
  const auto dir = fresh_dir("recompute-memory");
  const std::string job =
      "[model]\nlayers = 8\nhidden = 128\nheads = 4\nvocab = 256\nsequence = 128\n"
      "[training]\nglobal_batch = 16\nmicro_batch = 8\nsteps = 2\nseed = 3\ndevice = \"cpu\"\n"
      "[checkpoint]\ndir = \"ckpt\"\n[run]\ndir = \"run\"\n";
  const Layout layout = parse_layout("1x1x1x2");
  ChooserInput plan;
  plan.model = {8, 128, 4, 256, 128};
  plan.batch = {16, 8, ElementType::float32};
  std::map<Recompute, double> need;
  for (Recompute mode : kRecomputeModes) need[mode] = static_cast<double>(estimate_memory(plan, layout, mode).total());
  ASSERT_GT(need[Recompute::none], need[Recompute::attention]);
  ASSERT_GT(need[Recompute::attention], need[Recompute::block]);
  const std::map<Recompute, double> site_memory = {
      {Recompute::none, need[Recompute::none] * 1.05},
      {Recompute::attention, (need[Recompute::none] + need[Recompute::attention]) / 2},
      {Recompute::block, (need[Recompute::attention] + need[Recompute::block]) / 2}};

  constexpr double kMiB = 1048576.0;
  std::map<Recompute, std::vector<double>> measured, predicted;
  for (Recompute mode : kRecomputeModes) {
    const std::string name = recompute_name(mode);
    const auto run_dir = dir / name;
    std::filesystem::create_directories(run_dir);
    char gib[64];
    std::snprintf(gib, sizeof gib, "%.9f", site_memory.at(mode) / (1024.0 * kMiB));
    write_file(run_dir / "site.toml",
               std::string("[site]\nname = \"small\"\n[node]\ngpus_per_node = 2\nmemory_gib = ") + gib +
                   "\n[policy]\nmemory_headroom = 0\n");
    const TrainedRun run = train(run_dir, job, 2, "1x1x1x2", "--site " + (run_dir / "site.toml").string());
    EXPECT_TRUE(contains(run.summary, "\"recompute\": \"" + name + "\"")) << run.summary;
    EXPECT_TRUE(contains(run.output, "train: recompute " + name + " (auto: ")) << run.output;
    EXPECT_TRUE(contains(run.output, name + " fits: ")) << run.output;
    EXPECT_TRUE(contains(run.summary, "\"comm_bytes_match\": true")) << run.summary;
    measured[mode] = summary_numbers(run.summary, "model_memory_bytes");
    predicted[mode] = summary_numbers(run.summary, "predicted_memory_bytes");
    ASSERT_EQ(measured[mode].size(), 2u) << run.summary;
    ASSERT_EQ(predicted[mode].size(), 2u) << run.summary;
    for (size_t r = 0; r < 2; ++r)
      std::cout << "[ measured ] " << name << " rank " << r << ": peak " << measured[mode][r] / kMiB
                << " MiB for training, predicted " << predicted[mode][r] / kMiB << " MiB\n";
  }
  if (kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer build: its own memory is in the RSS, bounds not checked";
  for (size_t r = 0; r < 2; ++r) {
    double least = 1e30, most = -1e30;
    for (Recompute mode : kRecomputeModes) {
      const double over = measured[mode][r] - predicted[mode][r];
      EXPECT_GT(over, -0.05 * predicted[mode][r]) << recompute_name(mode) << " rank " << r << ": the model overcounts";
      EXPECT_LT(over, 32 * kMiB) << recompute_name(mode) << " rank " << r << ": more than the process's own buffers";
      least = std::min(least, over);
      most = std::max(most, over);
    }
    EXPECT_LT(most - least, 3 * kMiB) << "rank " << r << ": what the model leaves out differs between modes";
  }
  for (Recompute mode : {Recompute::attention, Recompute::block}) {
    const double saved = measured[Recompute::none][0] - measured[mode][0];
    const double saving = predicted[Recompute::none][0] - predicted[mode][0];
    std::cout << "[ measured ] " << recompute_name(mode) << " saves " << saved / kMiB << " MiB against none, predicted "
              << saving / kMiB << " MiB\n";
    EXPECT_NEAR(saved, saving, 0.05 * saving + 2 * kMiB) << recompute_name(mode);
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace axonn::test
