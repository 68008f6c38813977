// calibrate's arithmetic on what it measured of the links (runner/calibrate/calibrate_links.hpp),
// on hand-made measurements: the cores a tier's collectives keep busy, the fraction of a
// collective the compute beside it hides, and how much compute the probe runs beside it.
// The measurements themselves: tests/test_calibrate.cpp (mp).
#include <gtest/gtest.h>

#include <vector>

#include "runner/calibrate/calibrate_links.hpp"

namespace axonn {
namespace {

// One kind's sweep: wall and CPU seconds per size (bytes do not enter the fraction).
CollectiveSweep sweep(std::vector<double> seconds, std::vector<double> cpu_seconds) {
  CollectiveSweep s;
  s.bytes.assign(seconds.size(), 1024.0);
  s.seconds = std::move(seconds);
  s.cpu_seconds = std::move(cpu_seconds);
  return s;
}

// 8 ranks on 2 cores (4 per core): a call of 600 us that ran 100 us on a core keeps the cores
// 4 x 100 / 600 = 67% busy (the documented example).
// --quick measures fewer sizes (to 4 MiB), each as often as the full sweep does: a mean of a
// few calls on shared cores is a peer's lost time slice, not the call.
TEST(MessageRepetitions, QuickTimesEachOfItsSizesAsOftenAsTheFullSweep) {
  const std::vector<double> quick = message_sizes(true), full = message_sizes(false);
  EXPECT_EQ(quick.back(), 4.0 * 1024 * 1024);
  EXPECT_EQ(full.back(), kLargestMessage);
  for (double bytes : quick) {
    EXPECT_GE(message_repetitions(bytes), 10) << bytes;
    if (bytes <= 64 * 1024) {
      EXPECT_EQ(message_repetitions(bytes), 100) << bytes;
    }
  }
}

TEST(CoresBusy, IsCpuOverWallTimesRanksPerCore) {
  EXPECT_NEAR(cores_busy_fraction({sweep({600e-6}, {100e-6})}, 4.0), 4.0 * 100 / 600, 1e-12);
  EXPECT_NEAR(cores_busy_fraction({sweep({600e-6}, {100e-6})}, 2.0), 2.0 * 100 / 600, 1e-12);
}

// The median over every size of every kind: one size that a lost time slice stretched (its
// CPU share far below the others) moves it by one rank, not by its value.
TEST(CoresBusy, IsTheMedianOverSizesAndKinds) {
  const std::vector<CollectiveSweep> sweeps = {
      sweep({1e-3, 2e-3, 4e-3}, {0.20e-3, 0.40e-3, 0.80e-3}),  // 0.2 of wall on a core
      sweep({1e-3, 2e-3}, {0.25e-3, 0.02e-3}),                 // 0.25, and a stretched 0.01
  };
  // Per core: 0.2, 0.2, 0.2, 0.25, 0.01 -> median 0.2, times 3 ranks per core.
  EXPECT_NEAR(cores_busy_fraction(sweeps, 3.0), 0.6, 1e-12);
}

// Within [0, 1]: more CPU than the cores have (clock granularity on short calls) is all of
// them; sizes timed at zero seconds are left out; nothing measured, or no ranks per core, is 0.
TEST(CoresBusy, StaysWithinZeroAndOneAndSkipsWhatWasNotTimed) {
  EXPECT_EQ(cores_busy_fraction({sweep({1e-3}, {0.5e-3})}, 4.0), 1.0);
  EXPECT_NEAR(cores_busy_fraction({sweep({0.0, 1e-3}, {1e-3, 0.1e-3})}, 2.0), 0.2, 1e-12);
  EXPECT_EQ(cores_busy_fraction({}, 4.0), 0.0);
  EXPECT_EQ(cores_busy_fraction({sweep({0.0}, {0.0})}, 4.0), 0.0);
  EXPECT_EQ(cores_busy_fraction({sweep({1e-3}, {0.5e-3})}, 0.0), 0.0);
}

// (compute + collective - both) / collective: all hidden when the pair took the compute's
// time, none when it took both in turn, negative when it took longer (the collective cost
// more started beside compute than waited for), within [-1, 1] when noise says more or less.
// The overlap probe's sizes span the job's overlapped calls over every layout of the world;
// a job whose training.tp_chunks is "auto" (decided later, per layout) is probed at one chunk.
TEST(OverlapProbeSizes, SpanTheJobsOverlappedCallsWithTpChunksAutoAtOneChunk) {
  ChooserInput job;
  job.model = {2, 64, 4, 256, 32};
  job.batch = {8, 2, ElementType::float32};
  job.machine.tasks_per_node = 4;
  const std::vector<double> one = overlap_probe_sizes(job, 4);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_LT(one[0], one[1]);
  job.batch.tp_chunks = BatchShape::kAutoTpChunks;
  EXPECT_EQ(overlap_probe_sizes(job, 4), one);
}

TEST(OverlapFraction, IsTheShareOfTheCollectiveThePairSaved) {
  EXPECT_DOUBLE_EQ(overlap_fraction({.compute_s = 2.0, .collective_s = 1.0, .both_s = 2.0}), 1.0);
  EXPECT_DOUBLE_EQ(overlap_fraction({.compute_s = 2.0, .collective_s = 1.0, .both_s = 3.0}), 0.0);
  EXPECT_DOUBLE_EQ(overlap_fraction({.compute_s = 2.0, .collective_s = 1.0, .both_s = 2.5}), 0.5);
  EXPECT_DOUBLE_EQ(overlap_fraction({.compute_s = 2.0, .collective_s = 1.0, .both_s = 1.5}), 1.0);
  EXPECT_DOUBLE_EQ(overlap_fraction({.compute_s = 2.0, .collective_s = 1.0, .both_s = 3.5}), -0.5);
  EXPECT_DOUBLE_EQ(overlap_fraction({.compute_s = 2.0, .collective_s = 1.0, .both_s = 4.5}), -1.0);
  EXPECT_DOUBLE_EQ(overlap_fraction({.compute_s = 2.0, .collective_s = 0.0, .both_s = 2.0}), 0.0);
}

// GEMMs lasting about twice the collective, at least one (and one when either time is unknown).
TEST(OverlapGemmCount, CoversTwiceTheCollective) {
  EXPECT_EQ(overlap_gemm_count(0.25, 1.25), 10);
  EXPECT_EQ(overlap_gemm_count(0.75, 1.25), 4);  // ceil(2.5 / 0.75)
  EXPECT_EQ(overlap_gemm_count(1.0, 1e-3), 1);
  EXPECT_EQ(overlap_gemm_count(0.0, 1e-3), 1);
  EXPECT_EQ(overlap_gemm_count(1e-3, 0.0), 1);
  EXPECT_EQ(overlap_gemm_count(1e-9, 1.0), 10000);
}

}  // namespace
}  // namespace axonn
