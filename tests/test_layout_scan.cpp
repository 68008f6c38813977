// Scaling advice on hand-built points: throughput, the marginal gain of the added GPUs, time,
// energy and cost to train, the knee and the axis whose communication grows there; and the
// GPU counts `--scan` accepts (runner/scan/scan_counts.hpp).
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>

#include "runner/cli/args.hpp"
#include "runner/scan/scan_counts.hpp"
#include "layout/layout_scan.hpp"

namespace axonn {
namespace {

ScanPoint point(int gpus, double step_s, std::array<double, kCommAxisCount> comm_s = {}) {
  return ScanPoint{gpus, step_s, comm_s};
}

// 1000 tokens per step: 8 GPUs at 1 s, 16 at 0.5 s (perfect scaling), 32 at 0.4 s.
TEST(LayoutScan, RowsHoldThroughputMarginalGainTimeEnergyAndCost) {
  const ScanJob job{1000, 10, 500, 2};
  const auto rows = scan_rows({point(8, 1.0), point(16, 0.5), point(32, 0.4)}, job);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_DOUBLE_EQ(rows[0].tokens_per_s, 1000);
  EXPECT_DOUBLE_EQ(rows[1].tokens_per_s, 2000);
  EXPECT_DOUBLE_EQ(rows[2].tokens_per_s, 2500);
  EXPECT_DOUBLE_EQ(rows[0].tokens_per_s_per_gpu, 125);
  EXPECT_DOUBLE_EQ(rows[2].tokens_per_s_per_gpu, 78.125);
  EXPECT_DOUBLE_EQ(rows[0].per_gpu_vs_first, 1);
  EXPECT_DOUBLE_EQ(rows[1].per_gpu_vs_first, 1);
  EXPECT_DOUBLE_EQ(rows[2].per_gpu_vs_first, 0.625);
  EXPECT_FALSE(rows[0].marginal_tokens_per_s_per_gpu.has_value());
  EXPECT_DOUBLE_EQ(*rows[1].marginal_tokens_per_s_per_gpu, 125);  // 1000 more tokens/s from 8 more GPUs
  // Against the previous count (500 more from 16 more GPUs), not the first (1500 from 24).
  EXPECT_DOUBLE_EQ(*rows[2].marginal_tokens_per_s_per_gpu, 31.25);
  EXPECT_DOUBLE_EQ(rows[0].train_s, 10);
  EXPECT_DOUBLE_EQ(rows[2].train_s, 4);
  // 8 GPUs x 0.5 kW x 10 s = 40 kJ = 1/90 kWh; 32 GPUs x 0.5 kW x 4 s = 64 kJ.
  EXPECT_DOUBLE_EQ(*rows[0].energy_kwh, 40.0 / 3600);
  EXPECT_DOUBLE_EQ(*rows[2].energy_kwh, 64.0 / 3600);
  // 8 GPU-hours cost 16; a million tokens at 1000 tokens/s take 1000 s: 8 x 2 x 1000 / 3600.
  EXPECT_DOUBLE_EQ(*rows[0].cost_per_million_tokens, 16000.0 / 3600);
  EXPECT_DOUBLE_EQ(*rows[2].cost_per_million_tokens, 32 * 2 * 400.0 / 3600);
}

TEST(LayoutScan, UnknownPricesLeaveEnergyAndCostOut) {
  const auto rows = scan_rows({point(8, 1.0)}, ScanJob{1000, 10, 0, 0});
  EXPECT_FALSE(rows[0].energy_kwh.has_value());
  EXPECT_FALSE(rows[0].cost_per_million_tokens.has_value());
  const auto power_only = scan_rows({point(8, 1.0)}, ScanJob{1000, 10, 700, 0});
  EXPECT_TRUE(power_only[0].energy_kwh.has_value());
  EXPECT_FALSE(power_only[0].cost_per_million_tokens.has_value());
}

TEST(LayoutScan, PointsOutOfOrderOrWithoutATimeAreRefused) {
  EXPECT_THROW(scan_rows({point(16, 1.0), point(8, 1.0)}, ScanJob{1000, 1, 0, 0}), std::invalid_argument);
  EXPECT_THROW(scan_rows({point(8, 1.0), point(8, 0.5)}, ScanJob{1000, 1, 0, 0}), std::invalid_argument);
  EXPECT_THROW(scan_rows({point(8, 0.0)}, ScanJob{1000, 1, 0, 0}), std::invalid_argument);
  EXPECT_THROW(find_knee({point(8, 1.0)}, {}), std::invalid_argument);
}

// The knee is the first count whose added GPUs each bought less than half a GPU's tokens/s at
// the first count; the axis named is the one whose communication time grew most into it.
TEST(LayoutScan, KneeIsTheFirstCountBelowHalfAndNamesTheAxisThatGrew) {
  std::array<double, kCommAxisCount> at16{}, at32{};
  at16[static_cast<size_t>(CommAxis::data)] = 0.10;
  at16[static_cast<size_t>(CommAxis::z)] = 0.05;
  at32[static_cast<size_t>(CommAxis::data)] = 0.25;  // grew by 0.15
  at32[static_cast<size_t>(CommAxis::z)] = 0.02;     // shrank
  at32[static_cast<size_t>(CommAxis::x)] = 0.08;     // grew by 0.08, less than data
  const std::vector<ScanPoint> points = {point(8, 1.0), point(16, 0.5, at16), point(32, 0.4, at32), point(64, 0.39)};
  const auto rows = scan_rows(points, ScanJob{1000, 10, 0, 0});
  const auto knee = find_knee(points, rows);
  ASSERT_TRUE(knee.has_value());
  EXPECT_EQ(knee->row, 2u);  // 32 GPUs: 31.25 < 62.5; 64 is below too, but later
  EXPECT_DOUBLE_EQ(knee->marginal, 31.25);
  EXPECT_DOUBLE_EQ(knee->threshold, 62.5);
  ASSERT_TRUE(knee->growing_axis.has_value());
  EXPECT_EQ(*knee->growing_axis, CommAxis::data);
  EXPECT_DOUBLE_EQ(knee->comm_before_s, 0.10);
  EXPECT_DOUBLE_EQ(knee->comm_after_s, 0.25);
}

// 8 GPUs at 2 s: 500 tokens/s, 62.5 per GPU, so the threshold is 31.25 per added GPU. 24 GPUs
// at 1 s add 500 tokens/s for 16 GPUs, 31.25 each: not below. 25 GPUs add 500 for 17: below.
TEST(LayoutScan, KneeNeedsStrictlyLessThanHalf) {
  const std::vector<ScanPoint> even = {point(8, 2.0), point(24, 1.0)};
  EXPECT_FALSE(find_knee(even, scan_rows(even, ScanJob{1000, 1, 0, 0})).has_value());
  const std::vector<ScanPoint> below = {point(8, 2.0), point(25, 1.0)};
  const auto knee = find_knee(below, scan_rows(below, ScanJob{1000, 1, 0, 0}));
  ASSERT_TRUE(knee.has_value());
  EXPECT_EQ(knee->row, 1u);
  EXPECT_DOUBLE_EQ(knee->marginal, 500.0 / 17);
}

TEST(LayoutScan, NoKneeWhenScalingHoldsOrThereIsNothingToCompare) {
  const std::vector<ScanPoint> linear = {point(8, 1.0), point(16, 0.5), point(32, 0.25)};
  EXPECT_FALSE(find_knee(linear, scan_rows(linear, ScanJob{1000, 1, 0, 0})).has_value());
  const std::vector<ScanPoint> one = {point(8, 1.0)};
  EXPECT_FALSE(find_knee(one, scan_rows(one, ScanJob{1000, 1, 0, 0})).has_value());
  EXPECT_FALSE(find_knee({}, {}).has_value());
}

// A knee where no axis's communication grew (it stayed, compute shrank, the step did not halve):
// the knee is there, with no axis to blame. So is a count where throughput fell.
TEST(LayoutScan, KneeWithoutGrowingCommunicationNamesNoAxis) {
  std::array<double, kCommAxisCount> comm{};
  comm[static_cast<size_t>(CommAxis::data)] = 0.3;
  const std::vector<ScanPoint> points = {point(8, 1.0, comm), point(16, 0.8, comm), point(32, 0.9, comm)};
  const auto rows = scan_rows(points, ScanJob{1000, 1, 0, 0});
  const auto knee = find_knee(points, rows);
  ASSERT_TRUE(knee.has_value());
  EXPECT_EQ(knee->row, 1u);  // 250 tokens/s from 8 GPUs: 31.25 < 62.5
  EXPECT_FALSE(knee->growing_axis.has_value());
  EXPECT_LT(*rows[2].marginal_tokens_per_s_per_gpu, 0);  // slower at 32 than at 16
}

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "(no error)";
}

TEST(ScanCounts, RangesDoubleAndListsAreTakenAsGiven) {
  EXPECT_EQ(parse_scan_counts("8:64", 1 << 24), (std::vector<int>{8, 16, 32, 64}));
  EXPECT_EQ(parse_scan_counts("8,64,512", 1 << 24), (std::vector<int>{8, 64, 512}));
  EXPECT_EQ(parse_scan_counts("3:24", 1 << 24), (std::vector<int>{3, 6, 12, 24}));
  EXPECT_EQ(parse_scan_counts("8:8", 1 << 24), (std::vector<int>{8}));
  EXPECT_EQ(parse_scan_counts("1:16777216", 1 << 24).size(), 25u);
}

TEST(ScanCounts, MalformedValuesNameTheValueAndTheFix) {
  const auto expect = [](const std::string& value, const std::string& message) {
    const std::string err = usage_error([&] { parse_scan_counts(value, 1 << 24); });
    EXPECT_EQ(err.rfind("--scan '" + value + "': ", 0), 0u) << value << ": " << err;
    EXPECT_NE(err.find(message), std::string::npos) << value << ": " << err;
  };
  expect("64:8", "the range starts above its end (64 > 8); write it smallest first: 8:64");
  expect("0:64", "0 GPUs cannot train; counts start at 1");
  expect("8,0", "0 GPUs cannot train");
  expect("8:100",
         "100 is not 8 doubled a whole number of times; end the range at 64 or 128, or list the counts: "
         "--scan 8,16,32,64,100");
  expect("lots",
         "'lots' is not a GPU count (a whole number from 1); give A:B (GPU counts doubling from A to B, "
         "e.g. 8:512) or a list in increasing order (e.g. 8,64,512)");
  expect("-8:64", "'-8' is not a GPU count");
  expect("8:", "'' is not a GPU count");
  expect("8,,16", "'' is not a GPU count");
  expect("8.5", "'8.5' is not a GPU count");
  expect("", "no GPU counts");
  expect("8:16:32", "a range has one ':'");
  expect("8:16,32", "a range or a list, not both");
  expect("64,8", "counts must increase, and 8 comes after 64");
  expect("8,8", "counts must increase, and 8 comes after 8");
  expect("8:33554432", "33554432 GPUs is more than the 16777216 the chooser handles");
  expect("99999999999999999999999", "GPUs is more than the 16777216");
  std::string many;
  for (int i = 1; i <= 65; ++i) {  // appended piece by piece: GCC 12 -O3 warns falsely on "," + a temporary
    if (i > 1) many += ',';
    many += std::to_string(i);
  }
  expect(many, "65 counts are more than the 64 one scan prices");
}

TEST(ScanCounts, CountsMustBeWholeNodes) {
  EXPECT_NO_THROW(require_whole_nodes({8, 16, 64}, 8, "--gpus-per-node"));
  const std::string err = usage_error([] { require_whole_nodes({8, 12, 16}, 8, "site dgx-h100's gpus_per_node"); });
  EXPECT_EQ(err,
            "--scan: 12 GPUs is not a whole number of nodes of 8 GPUs (site dgx-h100's gpus_per_node); scan "
            "multiples of 8, or give --gpus-per-node G with G dividing every count");
}

}  // namespace
}  // namespace axonn
