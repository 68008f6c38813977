// The RoPE cos/sin table (trainer/model/rope_table.hpp) against values worked out by hand,
// and Llama 3.1's frequency scaling in each of its three regimes.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/model/rope_table.hpp"

namespace axonn {
namespace {

// theta 10000, d 4: inv_freq = (10000^0, 10000^(−1/2)) = (1, 0.01).
TEST(RopeTable, FrequenciesAndAnglesOfASmallHeadByHand) {
  const std::vector<double> inv_freq = rope_inv_freq(4, 10000.0, nullptr);
  ASSERT_EQ(inv_freq.size(), 2u);
  EXPECT_DOUBLE_EQ(inv_freq[0], 1.0);
  EXPECT_NEAR(inv_freq[1], 0.01, 1e-17);
  const std::vector<float> t = rope_cos_sin(3, 4, 10000.0, nullptr);  // (T 3, pairs 2, [cos, sin])
  ASSERT_EQ(t.size(), 12u);
  // position 0: no rotation
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], 0.0f);
  EXPECT_EQ(t[2], 1.0f);
  EXPECT_EQ(t[3], 0.0f);
  // position 2: angles 2 and 0.02, rounded once from double
  EXPECT_EQ(t[8], static_cast<float>(std::cos(2.0)));
  EXPECT_EQ(t[9], static_cast<float>(std::sin(2.0)));
  EXPECT_EQ(t[10], static_cast<float>(std::cos(0.02)));
  EXPECT_EQ(t[11], static_cast<float>(std::sin(0.02)));
}

// Llama 3.1's published values: factor 8, low 1, high 4, original 8192. The thresholds are
// wavelengths 8192/4 = 2048 (shorter: kept) and 8192/1 = 8192 (longer: divided by 8).
TEST(RopeTable, Llama31ScalingKeepsHighDividesLowAndBlendsTheMiddle) {
  const RopeScaling s{8.0, 1.0, 4.0, 8192};
  const double theta = 500000.0;
  const int64_t d = 128;
  const std::vector<double> plain = rope_inv_freq(d, theta, nullptr), scaled = rope_inv_freq(d, theta, &s);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE("pair " + std::to_string(i));
    const double wavelen = 2.0 * std::numbers::pi / plain[i];
    if (wavelen < 2048.0) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8.0);
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_GE(smooth, 0.0);
      EXPECT_LE(smooth, 1.0);
      EXPECT_DOUBLE_EQ(scaled[i], (1.0 - smooth) * plain[i] / 8.0 + smooth * plain[i]);
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8.0);
      ++blended;
    }
  }
  // theta 500000, d 128 has frequencies in all three regimes (the test would be empty otherwise).
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  // The table uses the scaled frequencies: position 1000, the last (lowest) frequency.
  const std::vector<float> table = rope_cos_sin(1001, d, theta, &s);
  const size_t last = (1000 * 64 + 63) * 2;
  EXPECT_EQ(table[last], static_cast<float>(std::cos(1000.0 * scaled[63])));
  EXPECT_EQ(table[last + 1], static_cast<float>(std::sin(1000.0 * scaled[63])));
}

// One frequency per regime, chosen by hand: with d 2 the only frequency is theta^0 = 1, of
// wavelength 2π ≈ 6.28; low 1, high 2, so original_positions P puts the thresholds at P/2
// and P: P 16 keeps it (2π < 8), P 6 divides it by the factor (2π > 6), P 10 blends (5 < 2π < 10).
TEST(RopeTable, EachScalingRegimeOnASingleFrequency) {
  const RopeScaling high{4.0, 1.0, 2.0, 16}, low{4.0, 1.0, 2.0, 6}, mid{4.0, 1.0, 2.0, 10};
  EXPECT_EQ(rope_inv_freq(2, 10000.0, &high)[0], 1.0);
  EXPECT_EQ(rope_inv_freq(2, 10000.0, &low)[0], 0.25);
  const double smooth = (10.0 / (2.0 * std::numbers::pi) - 1.0) / (2.0 - 1.0);
  EXPECT_DOUBLE_EQ(rope_inv_freq(2, 10000.0, &mid)[0], (1.0 - smooth) * 0.25 + smooth);
}

TEST(RopeTable, BadArgumentsAreRejectedNamingTheValue) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message([] { rope_cos_sin(4, 5, 10000.0, nullptr); }).find("d = 5"), std::string::npos);
  EXPECT_NE(message([] { rope_cos_sin(4, 4, 0.0, nullptr); }).find("theta = 0"), std::string::npos);
  EXPECT_NE(message([] { rope_cos_sin(-1, 4, 10000.0, nullptr); }).find("T = -1"), std::string::npos);
  const RopeScaling bad{8.0, 4.0, 1.0, 8192};
  EXPECT_NE(message([&] { rope_cos_sin(4, 4, 10000.0, &bad); }).find("high_freq_factor = 1"), std::string::npos);
}

}  // namespace
}  // namespace axonn
