// axonn train's measured step time against the layout model's prediction, as a user meets it
// (step_time_accuracy.hpp): summary.json records the median ratio, and a run priced on a site
// that does not describe its machine is warned about once, naming axonn calibrate.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "train_helpers.hpp"

namespace axonn::test {
namespace {

class TrainStepTime : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("step-time"); }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  double summary_number(const std::string& key) {
    const std::string summary = read_text(dir_ / "run" / "summary.json");
    std::smatch m;
    const std::regex re("\"" + key + R"(": ([-0-9.eE+]+))");
    EXPECT_TRUE(std::regex_search(summary, m, re)) << key << " not in\n" << summary;
    return m.empty() ? -1 : std::stod(m[1]);
  }
  std::filesystem::path dir_;
};

// A site whose ranks compute at 1000 TFLOP/s and talk at 1 TB/s with no latency: two CPU
// ranks on this machine are thousands of times slower than it predicts.
TEST_F(TrainStepTime, ASiteThatDoesNotDescribeTheMachineIsWarnedAboutOnceAfterTwentySteps) {
  write_file(dir_ / "job.toml", tiny_job(24, 0));
  write_file(dir_ / "fast.toml",
             "[site]\nname = \"far-too-fast\"\n[node]\ngpus_per_node = 2\nmemory_gib = 4\n"
             "[compute]\npeak_tflops_float32 = 1000\npeak_tflops_bfloat16 = 1000\nefficiency = 1\n"
             "[network]\nintra_node_bandwidth_GBps = 1000\nintra_node_latency_us = 0\n");
  const CommandResult r = run_train(dir_, 2, "2x1x1x1", "--site " + (dir_ / "fast.toml").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "the median step of 20 steps took "), 1u) << r.output;
  EXPECT_EQ(occurrences(r.output, "measure them with `axonn calibrate`"), 1u) << r.output;
  EXPECT_GT(summary_number("step_time_ratio"), 2.0);
  EXPECT_GT(summary_number("step_s_median"), 0.0);
  EXPECT_NEAR(summary_number("step_s_median") / summary_number("predicted_step_s"),
              summary_number("step_time_ratio"), 1e-3 * summary_number("step_time_ratio"));
}

// Fewer than 20 steps: no warning however far off, and the ratio still recorded.
TEST_F(TrainStepTime, AShortRunRecordsTheRatioWithoutWarning) {
  write_file(dir_ / "job.toml", tiny_job(5, 0));
  write_file(dir_ / "fast.toml",
             "[site]\nname = \"far-too-fast\"\n[node]\ngpus_per_node = 1\n"
             "[compute]\npeak_tflops_float32 = 1000\nefficiency = 1\n");
  const CommandResult r = run_train(dir_, 1, "1x1x1x1", "--site " + (dir_ / "fast.toml").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "axonn calibrate")) << r.output;
  EXPECT_GT(summary_number("step_time_ratio"), 2.0);
}

// metrics.jsonl's cpu_s is the process's CPU since the previous line: positive, and at most
// the wall time since that line on each of the rank's compute threads (a running total, or CPU
// counted twice, passes that by the third step).
TEST_F(TrainStepTime, EachLinesCpuSecondsAreThoseSinceThePreviousLine) {
  write_file(dir_ / "job.toml", tiny_job(6, 0));
  const CommandResult r = run_train(dir_, 1, "1x1x1x1");
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(backend cpu \(float32, (\d+) thread)"))) << r.output;
  const int threads = std::stoi(m[1]);
  std::ifstream metrics(dir_ / "run" / "metrics.jsonl");
  const std::regex cpu(R"("cpu_s": ([-0-9.eE+]+))"), elapsed(R"("elapsed_s": ([-0-9.eE+]+))");
  double previous_elapsed = 0;
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    ASSERT_TRUE(std::regex_search(line, m, cpu)) << line;
    const double cpu_s = std::stod(m[1]);
    ASSERT_TRUE(std::regex_search(line, m, elapsed)) << line;
    const double wall_s = std::stod(m[1]) - previous_elapsed;
    previous_elapsed = std::stod(m[1]);
    EXPECT_GT(cpu_s, 0.0) << line;
    EXPECT_LE(cpu_s, wall_s * threads * 1.1 + 0.002) << threads << " thread(s): " << line;
  }
  EXPECT_EQ(lines, 6);
}

}  // namespace
}  // namespace axonn::test
