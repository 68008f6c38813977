// The training data's schedule (trainer/data/data_mixture.hpp) and where a checkpoint leaves
// it (trainer/train/data_position.hpp): one source reads exactly the old sample order, a
// mixture gives every source its share in every prefix, the schedule continues from a cursor,
// and a resume on other data is refused unless the user says the data changed.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "trainer/data/data_mixture.hpp"
#include "trainer/train/data_position.hpp"

namespace {

using namespace axonn;

// tokens[i] = i % 251 (a prime, so windows at different offsets differ).
std::shared_ptr<const TokenData> counting(int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(i % 251);
  return std::make_shared<const TokenData>(TokenData::from_tokens(std::move(tokens), "counting " + std::to_string(n)));
}

DataMixture two_sources(double a, double b) {
  return DataMixture({{counting(4001), 0, 4001, a}, {counting(2001), 0, 2001, b}}, 7, 8);
}

template <typename F>
std::string data_error(F f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError";
  return "";
}

TEST(DataMixture, OneSourceReadsTheSampleOrderOfItsSeed) {
  const auto data = counting(1601);
  const DataMixture mixture = DataMixture::single(data, 1337, 16);
  const SampleOrder order(1337, 1601, 16);
  MixtureCursor cursor = mixture.start();
  const std::vector<SampleRef> refs = mixture.take(cursor, 250);  // past one epoch of 100 samples
  for (int64_t g = 0; g < 250; ++g) {
    EXPECT_EQ(refs[static_cast<size_t>(g)].source, 0);
    EXPECT_EQ(refs[static_cast<size_t>(g)].start, order.sample_start(g)) << g;
  }
  EXPECT_EQ(cursor, (MixtureCursor{250, {250}}));
  EXPECT_EQ(mixture.description(), "counting 1601");
  EXPECT_EQ(mixture.signature(), "1 x 1601 tokens");
}

// What a rank reads is a slice of the global batch's samples: any split over the data
// ranks reads the same windows, here across an epoch boundary (37 samples an epoch).
TEST(DataMixture, AnyDataParallelSplitReadsTheSameSamples) {
  const int T = 16;
  const DataMixture mixture = DataMixture::single(counting(37 * T + 5), 99, T);
  MixtureCursor cursor = mixture.start();
  mixture.take(cursor, 30);
  const std::vector<SampleRef> batch = mixture.take(cursor, 12);
  std::vector<int32_t> whole_in(12 * T), whole_tg(12 * T);
  mixture.read(batch.data(), 12, whole_in.data(), whole_tg.data());
  for (const int ranks : {2, 3, 4, 6, 12}) {
    const int per = 12 / ranks;
    std::vector<int32_t> in(12 * T), tg(12 * T);
    for (int r = 0; r < ranks; ++r)
      mixture.read(batch.data() + r * per, per, in.data() + r * per * T, tg.data() + r * per * T);
    EXPECT_EQ(in, whole_in) << ranks << " ranks";
    EXPECT_EQ(tg, whole_tg) << ranks << " ranks";
  }
  // Targets are the inputs shifted by one token.
  for (size_t k = 0; k < whole_in.size(); ++k) EXPECT_EQ(whole_tg[k], (whole_in[k] + 1) % 251);
}

TEST(DataMixture, EverySourceHasItsShareInEveryPrefix) {
  for (const auto& [a, b] : std::vector<std::pair<double, double>>{{0.3, 0.7}, {1, 1}, {1, 7}, {5, 0.001}}) {
    const DataMixture mixture = two_sources(a, b);
    MixtureCursor cursor = mixture.start();
    const std::vector<SampleRef> refs = mixture.take(cursor, 5000);
    int64_t from_first = 0;
    for (size_t g = 0; g < refs.size(); ++g) {
      from_first += refs[g].source == 0;
      const double want = a / (a + b) * static_cast<double>(g + 1);
      ASSERT_LT(std::fabs(static_cast<double>(from_first) - want), 1.0) << a << ":" << b << " after " << g + 1;
    }
    EXPECT_EQ(cursor.taken[0], from_first);
    EXPECT_EQ(cursor.taken[0] + cursor.taken[1], 5000);
  }
}

TEST(DataMixture, ContinuesFromACursorExactly) {
  const DataMixture mixture = two_sources(0.3, 0.7);
  MixtureCursor whole = mixture.start();
  const std::vector<SampleRef> all = mixture.take(whole, 1000);
  MixtureCursor parts = mixture.start();
  std::vector<SampleRef> pieced;
  for (const int64_t n : {1, 23, 24, 200, 752}) {
    const std::vector<SampleRef> part = mixture.take(parts, n);
    pieced.insert(pieced.end(), part.begin(), part.end());
  }
  EXPECT_EQ(parts, whole);
  ASSERT_EQ(pieced.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(pieced[i].source, all[i].source) << i;
    EXPECT_EQ(pieced[i].start, all[i].start) << i;
  }
}

TEST(DataMixture, AZeroWeightSourceGivesNothingAndReseedingKeepsTheSchedule) {
  DataMixture mixture = two_sources(1, 0);
  MixtureCursor cursor = mixture.start();
  const std::vector<SampleRef> refs = mixture.take(cursor, 300);
  for (const SampleRef& r : refs) EXPECT_EQ(r.source, 0);

  DataMixture mixed = two_sources(1, 2);
  MixtureCursor c1 = mixed.start();
  const std::vector<SampleRef> before = mixed.take(c1, 90);
  mixed.reseed(8);
  MixtureCursor c2 = mixed.start();
  const std::vector<SampleRef> after = mixed.take(c2, 90);
  int moved = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].source, before[i].source);  // the schedule has no seed
    moved += after[i].start != before[i].start;      // each source's order has
  }
  EXPECT_GT(moved, 45);
}

TEST(DataMixture, ReadsTheWindowsOfEachSourcesRange) {
  // Source 1 is tokens [800, 1601) of the same data: its windows start at 800 or later.
  const auto data = counting(1601);
  const DataMixture mixture({{data, 0, 801, 1}, {data, 800, 801, 1}}, 3, 8);
  MixtureCursor cursor = mixture.start();
  const std::vector<SampleRef> refs = mixture.take(cursor, 40);
  std::vector<int32_t> in(40 * 8), tg(40 * 8);
  mixture.read(refs.data(), 40, in.data(), tg.data());
  for (size_t i = 0; i < refs.size(); ++i) {
    if (refs[i].source == 0) {
      EXPECT_LE(refs[i].start + 8, 800);
    } else {
      EXPECT_GE(refs[i].start, 800);
    }
    for (int t = 0; t < 8; ++t) {
      EXPECT_EQ(in[i * 8 + static_cast<size_t>(t)], (refs[i].start + t) % 251);
      EXPECT_EQ(tg[i * 8 + static_cast<size_t>(t)], (refs[i].start + t + 1) % 251);
    }
  }
  EXPECT_EQ(mixture.signature(), "0.5 x 801 tokens + 0.5 x 801 tokens from 800");
  EXPECT_EQ(mixture.description(),
            "0.5 counting 1601, tokens [0, 801) + 0.5 counting 1601, tokens [800, 1601)");
}

TEST(DataMixture, BadWeightsAndShortSourcesAreNamed) {
  EXPECT_NE(data_error([] { two_sources(-1, 2); }).find("has weight -1; weights are finite and >= 0"),
            std::string::npos);
  EXPECT_NE(data_error([] { two_sources(0, 0); }).find("weights sum to 0"), std::string::npos);
  EXPECT_NE(data_error([] { two_sources(NAN, 1); }).find("weights are finite"), std::string::npos);
  EXPECT_FALSE(data_error([] { DataMixture({{counting(8), 0, 8, 1}}, 1, 8); }).empty());
  EXPECT_FALSE(data_error([] { DataMixture({}, 1, 8); }).empty());
}

// ---- the checkpoint's data position ----------------------------------------------------------

TEST(DataPosition, TheSameMixtureContinuesWhereItStopped) {
  const DataMixture mixture = two_sources(0.3, 0.7);
  MixtureCursor cursor = mixture.start();
  mixture.take(cursor, 77);
  Metadata md;
  write_data_position(md, mixture, cursor);
  EXPECT_EQ(md.data_cursor, 77);
  const DataPosition got = read_data_position(md, two_sources(0.3, 0.7), false, "step-000000003");
  EXPECT_EQ(got.cursor, cursor);
  EXPECT_TRUE(got.changed.empty());
}

TEST(DataPosition, AStepFromBeforeMixturesIsOneSourceThatGaveEverySample) {
  Metadata md;
  md.data_cursor = 48;  // no data.mixture: written before mixtures, or by import-hf (0)
  const DataPosition got = read_data_position(md, DataMixture::single(counting(1000), 5, 8), false, "s");
  EXPECT_EQ(got.cursor, (MixtureCursor{48, {48}}));
  // A mixture cannot tell which source gave those samples.
  EXPECT_NE(data_error([&] { read_data_position(md, two_sources(1, 1), false, "s"); }).find("--data-changed"),
            std::string::npos);
}

TEST(DataPosition, OtherDataIsRefusedUnlessTheUserSaysItChanged) {
  const DataMixture before = two_sources(0.3, 0.7);
  MixtureCursor cursor = before.start();
  before.take(cursor, 100);
  Metadata md;
  write_data_position(md, before, cursor);

  const DataMixture reweighted = two_sources(0.5, 0.5);
  const std::string refused = data_error([&] { read_data_position(md, reweighted, false, "ckpt/step-000000004"); });
  for (const std::string part : {"ckpt/step-000000004 was trained on other data (0.3 x 4001 tokens + 0.7 x 2001 "
                                 "tokens) than the job's (0.5 x 4001 tokens + 0.5 x 2001 tokens)",
                                 "--data-changed"})
    EXPECT_NE(refused.find(part), std::string::npos) << refused;

  const DataPosition kept = read_data_position(md, reweighted, true, "s");
  EXPECT_EQ(kept.cursor, cursor);  // the counts go on; the weights steer from here
  EXPECT_NE(kept.changed.find("the data changed (--data-changed)"), std::string::npos) << kept.changed;

  // A third source starts at its beginning.
  const DataMixture grown({{counting(4001), 0, 4001, 1}, {counting(2001), 0, 2001, 1}, {counting(999), 0, 999, 1}}, 7,
                          8);
  const DataPosition added = read_data_position(md, grown, true, "s");
  EXPECT_EQ(added.cursor, (MixtureCursor{100, {cursor.taken[0], cursor.taken[1], 0}}));
}

}  // namespace
