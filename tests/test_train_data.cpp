// Training on real data as a user configures it: a weighted mixture of sources whose
// schedule a resume at another world size continues sample for sample, a changed mixture
// refused unless --data-changed says so, and held-out data evaluated every run.eval_interval
// steps without changing what trains.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "checkpoint/reader.hpp"
#include "train_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using namespace axonn::test;

constexpr double kLossTolerance = 2e-5;
constexpr float kWeightTolerance = 2e-5f;

// The tiny job on a mixture of the built-in corpus (weight `a`) and other.txt (weight `b`).
std::string mixture_job(int steps, int interval, double a, double b, const std::string& data_extra = "") {
  return tiny_job(steps, interval) + "[data]\n" + data_extra +
         "[[data.sources]]\npath = \"\"\nweight = " + std::to_string(a) +
         "\n[[data.sources]]\npath = \"other.txt\"\nweight = " + std::to_string(b) + "\n";
}

TrainedRun train_job(const fs::path& dir, const std::string& job, int ranks, const std::string& layout,
                     const std::string& extra = "") {
  fs::create_directories(dir);
  write_file(dir / "other.txt", other_text());
  return train_in(dir, job, ranks, layout, extra);
}

// Each metrics.jsonl line's "eval_loss", where it has one.
std::vector<std::optional<double>> eval_losses(const fs::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<std::optional<double>> out;
  const std::regex re(R"(\"eval_loss\": ([-0-9.eE+]+))");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    out.push_back(std::regex_search(line, m, re) ? std::optional<double>(std::stod(m[1])) : std::nullopt);
  }
  return out;
}

class TrainData : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("data"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(TrainData, AMixtureResumedAtAnotherWorldSizeReadsWhatTheRunWouldHave) {
  const std::string job = mixture_job(6, 3, 1, 3);
  const TrainedRun full = train_job(dir_ / "full", job, 4, "2x1x1x2");
  ASSERT_EQ(full.steps.size(), 6u);
  EXPECT_TRUE(contains(full.output, "data: 0.25 built-in corpus")) << full.output;
  EXPECT_TRUE(contains(full.output, " + 0.75 " + (dir_ / "full" / "other.txt").string())) << full.output;
  // 6 steps of 24 samples, a quarter of them from the built-in corpus in every prefix.
  const axonn::CheckpointReader reader = axonn::CheckpointReader::open_latest(dir_ / "full" / "ckpt");
  EXPECT_EQ(reader.metadata().ints.at("data.taken.0"), 36);
  EXPECT_EQ(reader.metadata().ints.at("data.taken.1"), 108);

  // Not the built-in corpus alone: the first step's loss is another.
  const TrainedRun corpus_only = train_in(dir_ / "corpus", tiny_job(2, 0), 1, "1x1x1x1");
  EXPECT_GT(std::fabs(corpus_only.steps.at(0).loss - full.steps.at(0).loss), 1e-3);

  for (const auto& [ranks, layout] : std::vector<std::pair<int, std::string>>{{1, "1x1x1x1"}, {3, "3x1x1x1"}}) {
    const fs::path dir = copy_checkpoint_step(dir_ / "full", 3, dir_ / ("resume-" + layout));
    const TrainedRun resumed = train_job(dir, job, ranks, layout);
    TrainedRun want = full;
    want.steps.erase(want.steps.begin(), want.steps.begin() + 3);
    expect_same_run(resumed, want, kLossTolerance, kWeightTolerance, "mixture resumed at " + layout);
  }
}

TEST_F(TrainData, AChangedMixtureIsRefusedUnlessDataChangedSaysSo) {
  train_job(dir_, mixture_job(2, 0, 1, 3), 1, "1x1x1x1");
  write_file(dir_ / "job.toml", mixture_job(4, 0, 1, 1));
  const CommandResult refused = run_train(dir_, 1, "1x1x1x1");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_TRUE(contains(refused.output, "was trained on other data (0.25 x")) << refused.output;
  EXPECT_TRUE(contains(refused.output, "than the job's (0.5 x")) << refused.output;
  EXPECT_TRUE(contains(refused.output, "--data-changed")) << refused.output;
  EXPECT_EQ(read_metrics(dir_ / "run").size(), 2u) << "nothing trained";

  const CommandResult resumed = run_train(dir_, 1, "1x1x1x1", "--data-changed");
  EXPECT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "the data changed (--data-changed)")) << resumed.output;
  EXPECT_EQ(read_metrics(dir_ / "run").size(), 4u);
}

TEST_F(TrainData, HeldOutDataIsEvaluatedAtTheIntervalAndLeavesTrainingAlone) {
  const std::string held = "valid_fraction = 0.1\n";
  const TrainedRun plain = train_job(dir_ / "plain", mixture_job(4, 0, 1, 3, held), 1, "1x1x1x1");
  std::string job = mixture_job(4, 0, 1, 3, held);
  job.replace(job.find("log_interval = 1\n"), 17, "log_interval = 1\neval_interval = 2\neval_batches = 2\n");
  const TrainedRun serial = train_job(dir_ / "serial", job, 1, "1x1x1x1");
  // Evaluating reads other samples and updates nothing: training is the same bits.
  TrainedRun trained = serial;
  for (StepLine& step : trained.steps) step.eval_loss.reset();
  expect_same_run(trained, plain, 0, 0, "with evaluations");
  const std::vector<std::optional<double>> losses = eval_losses(dir_ / "serial" / "run");
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_FALSE(losses[0] || losses[2]) << "steps 1 and 3 are not evaluated";
  ASSERT_TRUE(losses[1] && losses[3]);
  EXPECT_GT(*losses[1], 1.0);
  EXPECT_LT(*losses[3], *losses[1] + 0.5);
  EXPECT_TRUE(contains(serial.output, "held-out loss")) << serial.output;
  EXPECT_TRUE(contains(serial.output, "(48 samples)")) << serial.output;

  // Every layout evaluates the same samples: the same loss up to float32 rounding.
  const TrainedRun split = train_job(dir_ / "split", job, 4, "2x1x1x2");
  const std::vector<std::optional<double>> split_losses = eval_losses(dir_ / "split" / "run");
  ASSERT_EQ(split_losses.size(), 4u);
  ASSERT_TRUE(split_losses[1] && split_losses[3]);
  EXPECT_NEAR(*split_losses[1], *losses[1], kLossTolerance);
  EXPECT_NEAR(*split_losses[3], *losses[3], kLossTolerance);
}

TEST_F(TrainData, AHeldOutFileIsEvaluatedToo) {
  std::string job = tiny_job(2, 0) + "[data]\nvalid = \"other.txt\"\n";
  job.replace(job.find("log_interval = 1\n"), 17, "log_interval = 1\neval_interval = 1\n");
  train_job(dir_, job, 2, "2x1x1x1");
  const std::vector<std::optional<double>> losses = eval_losses(dir_ / "run");
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_TRUE(losses[0] && losses[1]);
}

TEST_F(TrainData, BadDataIsABadInputBeforeAnyRankTrains) {
  fs::create_directories(dir_);
  write_file(dir_ / "other.txt", other_text());
  write_file(dir_ / "short.txt", std::string(300, 'x'));  // 18 samples of 16: fewer than a batch of 24
  struct Case {
    std::string name, job, want;
  };
  std::string eval_without_held_out = tiny_job(2, 0);
  eval_without_held_out.replace(eval_without_held_out.find("log_interval = 1\n"), 17,
                                "log_interval = 1\neval_interval = 2\n");
  const std::vector<Case> cases = {
      {"negative weight", mixture_job(2, 0, -1, 1), "weight"},
      {"weights sum to zero", mixture_job(2, 0, 0, 0), "weights sum to 0"},
      {"a source too small", tiny_job(2, 0) + "[data]\n[[data.sources]]\npath = \"short.txt\"\nweight = 1\n",
       "short.txt"},
      {"too little held out", mixture_job(2, 0, 1, 1, "valid_fraction = 0.9\n"), "valid_fraction"},
      {"evaluation without held-out data", eval_without_held_out, "needs held-out data"},
  };
  for (const Case& c : cases) {
    write_file(dir_ / "job.toml", c.job);
    const CommandResult r = run_train(dir_, 2, "2x1x1x1");
    EXPECT_EQ(r.code, 2) << c.name << ":\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.want)) << c.name << ": '" << c.want << "' not in\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "run" / "metrics.jsonl")) << c.name;
  }
}

}  // namespace
