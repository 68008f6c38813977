// StepTimeAccuracy (trainer/train/step_time_accuracy.hpp): the median measured step against
// the prediction, and the one warning when it leaves [0.5, 2] after 20 steps.
#include "trainer/train/step_time_accuracy.hpp"

#include <gtest/gtest.h>

namespace axonn {
namespace {

TEST(StepTimeAccuracy, TheMedianIgnoresAFirstStepsOneTimeCosts) {
  StepTimeAccuracy a(0.1);
  EXPECT_EQ(a.median_step_s(), 0);
  EXPECT_EQ(a.ratio(), 0);
  a.add(5.0);  // the first step: allocations, plans, page faults
  a.add(0.2);
  a.add(0.3);
  EXPECT_DOUBLE_EQ(a.median_step_s(), 0.3);
  EXPECT_DOUBLE_EQ(a.ratio(), 3.0);
  a.add(0.1);
  EXPECT_DOUBLE_EQ(a.median_step_s(), 0.25);  // even count: the mean of the middle two
}

TEST(StepTimeAccuracy, WarnsOnceFromTheTwentiethStepWhenOutsideHalfToTwice) {
  StepTimeAccuracy a(0.01);
  for (int i = 0; i < 19; ++i) {
    a.add(0.05);
    EXPECT_FALSE(a.warning_due().has_value()) << "step " << i + 1;
  }
  a.add(0.05);
  const std::optional<std::string> w = a.warning_due();
  ASSERT_TRUE(w.has_value());
  EXPECT_NE(w->find("the median step of 20 steps took 0.05 s, 5.00x the 0.01 s the layout model predicts"),
            std::string::npos)
      << *w;
  EXPECT_NE(w->find("axonn calibrate"), std::string::npos) << *w;
  a.add(0.05);
  EXPECT_FALSE(a.warning_due().has_value()) << "warned twice";
}

TEST(StepTimeAccuracy, APredictionWithinTheBoundsIsQuietUntilTheMedianLeavesThem) {
  StepTimeAccuracy a(0.1);
  for (int i = 0; i < 20; ++i) a.add(i % 2 ? 0.06 : 0.19);  // median 0.125: 1.25x
  EXPECT_FALSE(a.warning_due().has_value());
  for (int i = 0; i < 21; ++i) a.add(0.04);  // the median falls to 0.04: 0.4x
  const std::optional<std::string> w = a.warning_due();
  ASSERT_TRUE(w.has_value());
  EXPECT_NE(w->find("0.40x"), std::string::npos) << *w;
}

TEST(StepTimeAccuracy, NoPredictionNoWarning) {
  StepTimeAccuracy a(0);
  for (int i = 0; i < 30; ++i) a.add(1.0);
  EXPECT_FALSE(a.warning_due().has_value());
  EXPECT_EQ(a.ratio(), 0);
}

}  // namespace
}  // namespace axonn
