// Which backend `axonn train` computes on (training.device, cli/train_device.hpp), as a user
// sees it on a machine without a GPU: the log names the choice and why, and every request
// this machine cannot serve stops the run before anything starts (exit 2) with the fix.
// The tests that need the absence of a GPU skip where one is visible; test_train_gpu.cpp
// (label gpu) covers the other side.
#include <gtest/gtest.h>

#include "comm/cuda_device.hpp"
#include "train_helpers.hpp"

namespace axonn::test {
namespace {

class TrainDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("device");
    write_file(dir_ / "job.toml", tiny_job(2, 0));  // training.device = "cpu" unless overridden
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  CommandResult train(const std::string& overrides, int ranks = 1) {
    return run_train(dir_, ranks, ranks == 1 ? "1x1x1x1" : "", overrides);
  }
  std::filesystem::path dir_;
};

#define SKIP_WITH_A_GPU()                                                                                 \
  do {                                                                                                    \
    if (cuda_device_count() > 0)                                                                          \
      GTEST_SKIP() << "this machine has a CUDA device: test_train_gpu (label gpu) covers training on it"; \
  } while (0)

TEST_F(TrainDevice, CpuIsFloat32OnGlooAndSaysSo) {
  const CommandResult r = train("training.device=cpu", 2);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "backend cpu (float32, ")) << r.output;
  EXPECT_TRUE(contains(r.output, "), collectives gloo")) << r.output;
  EXPECT_TRUE(contains(r.output, "device: training.device = \"cpu\"")) << r.output;
  EXPECT_TRUE(contains(read_text(dir_ / "run" / "summary.json"), "\"comm_bytes_match\": true"));
}

TEST_F(TrainDevice, AutoWithoutAGpuTrainsOnTheCpuNamingWhy) {
  SKIP_WITH_A_GPU();
  std::string why;
  ASSERT_EQ(cuda_device_count(&why), 0);
  const CommandResult r = train("training.device=auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "backend cpu (float32, ")) << r.output;
  EXPECT_TRUE(contains(r.output, "), collectives gloo")) << r.output;
  EXPECT_TRUE(contains(r.output, "device: training.device = \"auto\": no CUDA device (" + why + ")")) << r.output;
}

TEST_F(TrainDevice, CudaWithoutAGpuIsABadInputNamingTheFix) {
  SKIP_WITH_A_GPU();
  const CommandResult r = train("training.device=cuda");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "training.device = \"cuda\" but rank 0 on ")) << r.output;
  EXPECT_TRUE(contains(r.output, "sees no CUDA device (")) << r.output;
  EXPECT_TRUE(contains(r.output, "set training.device = \"cpu\"")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "metrics.jsonl")) << "nothing may start";
}

TEST_F(TrainDevice, Bfloat16OnTheCpuIsABadInputNamingBothFixes) {
  const CommandResult r = train("training.device=cpu training.dtype=bfloat16");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "training.dtype = \"bfloat16\" needs the CUDA backend")) << r.output;
  EXPECT_TRUE(contains(r.output, "(training.device = \"cpu\")")) << r.output;
  EXPECT_TRUE(contains(r.output, "set training.dtype = \"float32\", or run on GPUs")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "metrics.jsonl")) << "nothing may start";
}

TEST_F(TrainDevice, Bfloat16WithAutoAndNoGpuSaysWhyTheCpuWasChosen) {
  SKIP_WITH_A_GPU();
  const CommandResult r = train("training.device=auto training.dtype=bfloat16");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "training.dtype = \"bfloat16\" needs the CUDA backend")) << r.output;
  EXPECT_TRUE(contains(r.output, "training.device = \"auto\": no CUDA device")) << r.output;
}

}  // namespace
}  // namespace axonn::test
