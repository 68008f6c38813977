// What calibrate times of a rank's GEMMs (runner/calibrate/calibrate_gemm.hpp): each run on the
// next of enough operand sets to fill 64 MiB, so the operands come from memory as in training;
// and how it repeats its timings (mean_seconds.hpp): windows, and passes taken in turns.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "runner/calibrate/calibrate_gemm.hpp"
#include "runner/calibrate/mean_seconds.hpp"
#include "trainer/cpu/cpu_backend.hpp"

namespace axonn {
namespace {

// Runs start until the window has passed, at least min_runs of them; the mean is their total
// time (at least the window) over their count.
TEST(CalibrateGemm, MeanSecondsWithinRunsThroughTheWindow) {
  int runs = 0;
  const auto sleep_1ms = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++runs;
  };
  const double mean = mean_seconds_within(sleep_1ms, 0.02, 3);
  EXPECT_GE(runs * mean, 0.02);
  EXPECT_GE(mean, 0.001);
  runs = 0;
  mean_seconds_within(sleep_1ms, 0.0, 3);  // an empty window still takes the fewest runs
  EXPECT_EQ(runs, 3);
}

// Items are timed in turns, pass after pass, and each keeps the median of its passes: one
// slow pass of an item (the machine slowed for a while) does not move it.
TEST(CalibrateGemm, MedianOverPassesTakesItemsInTurns) {
  std::vector<size_t> order;
  const std::vector<std::vector<double>> times = {{1.0, 9.0, 2.0}, {5.0, 4.0, 30.0}};  // [item][pass]
  std::vector<size_t> pass_of(2, 0);
  const std::vector<double> medians = median_over_passes(2, 3, [&](size_t i) {
    order.push_back(i);
    return times[i][pass_of[i]++];
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(medians, (std::vector<double>{2.0, 5.0}));
}

// A size's calls split over the passes, rounded up, at least one a pass.
TEST(CalibrateGemm, PassRepetitionsSplitASizesCalls) {
  EXPECT_EQ(pass_repetitions(100), (100 + kTimingPasses - 1) / kTimingPasses);
  EXPECT_GE(pass_repetitions(5) * kTimingPasses, 5);
  EXPECT_EQ(pass_repetitions(1), 1);
}

TEST(CalibrateGemm, OperandSetsFillTheColdWorkingSet) {
  // 256x64x512 in float32: X and dX 64 KiB each, Y and dY 512 KiB each, W and dW 128 KiB
  // each = 1408 KiB a set; 64 MiB / 1408 KiB = 46.5, so 47 sets.
  EXPECT_EQ(cold_operand_sets(GemmShape{256, 64, 512}, ElementType::float32), 47);
  // bfloat16 halves all but dW (float32): 640 KiB + 128 KiB = 768 KiB, 85.3 -> 86 sets.
  EXPECT_EQ(cold_operand_sets(GemmShape{256, 64, 512}, ElementType::bfloat16), 86);
  // A shape larger than the working set needs no second set; a tiny one stops at 256.
  EXPECT_EQ(cold_operand_sets(GemmShape{4096, 4096, 4096}, ElementType::float32), 1);
  EXPECT_EQ(cold_operand_sets(GemmShape{8, 8, 8}, ElementType::float32), 256);
}

TEST(CalibrateGemm, AttentionOperandSetsFillTheColdWorkingSet) {
  // 4 sequences of 64, 8 heads of 16 in float32: qkv and dqkv 384 KiB each, out and dout
  // 128 KiB each, lse 8 KiB = 1032 KiB a set; 64 MiB / 1032 KiB = 63.5, so 64 sets.
  EXPECT_EQ(cold_operand_sets(AttentionShape{4, 64, 8, 16}, ElementType::float32), 64);
  EXPECT_EQ(cold_operand_sets(AttentionShape{8, 4096, 32, 128}, ElementType::bfloat16), 1);
}

TEST(CalibrateGemm, TimesTheThreeGemmsOfALayerOnColdOperands) {
  auto backend = make_cpu_backend(1);
  int starts = 0;
  const double seconds = time_linear_gemms(*backend, ElementType::float32, {64, 32, 48}, 0.01, [&] { ++starts; });
  EXPECT_EQ(starts, 1);
  EXPECT_TRUE(std::isfinite(seconds));
  EXPECT_GT(seconds, 0.0);
}

TEST(CalibrateGemm, TimesAttentionOnColdOperands) {
  auto backend = make_cpu_backend(1);
  int starts = 0;
  const double seconds =
      time_attention(*backend, ElementType::float32, AttentionShape{1, 16, 2, 8}, 0.01, [&] { ++starts; });
  EXPECT_EQ(starts, 1);
  EXPECT_TRUE(std::isfinite(seconds));
  EXPECT_GT(seconds, 0.0);
}

// The probe is one block of the job at its full width, its bytes the model's for those passes:
// per element of the (rows, C) stream, LayerNorms 4 + 4 forward and 8 backward, biases 2 and 1
// per output element of qkv (3C), attn.proj (C), mlp.fc (4C) and mlp.proj (C), GELU 2 + 3 per
// element of (rows, 4C): 63·rows·C elements.
TEST(CalibrateGemm, ElementwiseProbeIsABlockOfTheJobInTheModelsBytes) {
  ChooserInput job;
  job.model = {2, 64, 4, 256, 64};  // layers, hidden, heads, vocab, sequence
  job.batch = {12, 4, ElementType::float32};
  job.machine.gemm_epilogues = true;  // the probe counts its passes unfused whatever the job's machine
  const ElementwiseProbe p = elementwise_probe(job, ElementType::float32, false);
  EXPECT_EQ(p.rows, 4 * 64);
  EXPECT_EQ(p.width, 64);
  EXPECT_EQ(p.mlp, 256);
  EXPECT_DOUBLE_EQ(p.bytes, 63.0 * 256 * 64 * 4);
  EXPECT_DOUBLE_EQ(elementwise_probe(job, ElementType::bfloat16, true).bytes, 63.0 * 256 * 64 * 2);
  // Without a job: 2048 rows of 1024 on a CPU, 8192 on a GPU.
  EXPECT_EQ(elementwise_probe(std::nullopt, ElementType::float32, false).rows, 2048);
  EXPECT_EQ(elementwise_probe(std::nullopt, ElementType::bfloat16, true).rows, 8192);
  EXPECT_EQ(elementwise_probe(std::nullopt, ElementType::bfloat16, true).width, 1024);
}

TEST(CalibrateGemm, TimesTheElementwiseProbeOnTheBackendsOwnOps) {
  auto backend = make_cpu_backend(1);
  ElementwiseProbe p;
  p.rows = 16, p.width = 8, p.mlp = 32;
  int starts = 0;
  const double seconds = time_elementwise(*backend, ElementType::float32, p, 0.01, [&] { ++starts; });
  EXPECT_EQ(starts, 1);
  EXPECT_TRUE(std::isfinite(seconds));
  EXPECT_GT(seconds, 0.0);
}

}  // namespace
}  // namespace axonn
