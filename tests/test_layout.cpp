// The layout library: grid numbering, groups, enumeration, the byte/memory/cost models
// and the chooser's properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "core/number_text.hpp"
#include "layout/alpha_beta_fit.hpp"
#include "layout/comm_overlap.hpp"
#include "layout/layout_report.hpp"
#include "layout/layout_search.hpp"
#include "layout/memory_bound_bytes.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// The kinds the trainer's collectives use, which calibrate fits.
constexpr std::array<CollectiveKind, 3> kCalibratedKindsForTest = {
    CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter};

std::vector<std::array<Axis, 4>> some_orders() {
  return {{Axis::x, Axis::y, Axis::z, Axis::data},
          {Axis::data, Axis::z, Axis::y, Axis::x},
          {Axis::y, Axis::x, Axis::data, Axis::z},
          {Axis::z, Axis::data, Axis::x, Axis::y}};
}

TEST(Layout, RankCoordinateRoundTripForEveryLayoutOfWorlds1To64) {
  for (int world = 1; world <= 64; ++world) {
    for (const Layout& base : enumerate_layouts(world)) {
      if (base.order != some_orders()[0]) continue;  // sizes once; orders below
      for (const auto& order : some_orders()) {
        Layout l = base;
        l.order = order;
        for (int r = 0; r < world; ++r) ASSERT_EQ(l.rank(l.coords(r)), r) << format_layout_with_order(l);
      }
    }
  }
}

TEST(Layout, DefaultNumberingIsXFastestThenYZData) {
  const Layout l = parse_layout("2x3x2x2");  // data 2, x 3, y 2, z 2
  const Coords c{1, 1, 1, 1};                // x, y, z, data
  EXPECT_EQ(l.rank(c), ((1 * 2 + 1) * 2 + 1) * 3 + 1);
  EXPECT_EQ(l.stride(Axis::x), 1);
  EXPECT_EQ(l.stride(Axis::y), 3);
  EXPECT_EQ(l.stride(Axis::z), 6);
  EXPECT_EQ(l.stride(Axis::data), 12);
}

TEST(Layout, GroupsCoverTheWorldOnceAndShareOtherCoordinates) {
  for (const auto& order : some_orders()) {
    Layout l = parse_layout("2x2x3x2");
    l.order = order;
    for (Axis a : kAllAxes) {
      std::multiset<int> covered;
      const auto groups = l.groups(a);
      EXPECT_EQ(static_cast<int>(groups.size()), l.world() / l.size(a));
      for (const auto& g : groups) {
        ASSERT_EQ(static_cast<int>(g.size()), l.size(a));
        for (size_t i = 0; i < g.size(); ++i) {
          covered.insert(g[i]);
          Coords expect = l.coords(g[0]);
          expect[a] = static_cast<int>(i);
          EXPECT_EQ(l.coords(g[i]), expect);  // differs only along a, in group-rank order
          EXPECT_EQ(l.group(a, g[i]), g);
        }
      }
      EXPECT_EQ(covered.size(), static_cast<size_t>(l.world()));
      EXPECT_EQ(std::set<int>(covered.begin(), covered.end()).size(), static_cast<size_t>(l.world()));
    }
  }
}

TEST(Layout, ParsesAndPrints) {
  const Layout l = parse_layout("2x2x1x2:yxzd");
  EXPECT_EQ(l.data, 2);
  EXPECT_EQ(l.x, 2);
  EXPECT_EQ(l.y, 1);
  EXPECT_EQ(l.z, 2);
  EXPECT_EQ(format_layout_with_order(l), "2x2x1x2:yxzd");
  EXPECT_EQ(format_order(parse_layout("1x1x1x1")), "xyzd");
  for (const char* bad : {"2x2x2", "2x2x0x1", "ax1x1x1", "2x2x1x2:xyz", "2x2x1x2:xxzd", "", "1x1x1x1x1"}) {
    try {
      parse_layout(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const LayoutError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

// "eN" after the four sizes is the expert parallelism; the order still follows ':'. E_p = 1
// prints as no "e" at all, so every spelling without one keeps its meaning.
TEST(Layout, ParsesAndPrintsTheExpertPart) {
  struct Case {
    const char* text;
    int experts;
    const char* plain;
    const char* with_order;
  };
  for (const Case& c :
       {Case{"4x2x1x1e2", 2, "4x2x1x1e2", "4x2x1x1e2:xyzd"}, Case{"8x2x1x1e4:xyzd", 4, "8x2x1x1e4", "8x2x1x1e4:xyzd"},
        Case{"8x1x2x1e8:dzyx", 8, "8x1x2x1e8", "8x1x2x1e8:dzyx"},
        Case{"6x1x1x2e3:yxzd", 3, "6x1x1x2e3", "6x1x1x2e3:yxzd"}, Case{"4x1x1x1e1", 1, "4x1x1x1", "4x1x1x1:xyzd"}}) {
    const Layout l = parse_layout(c.text);
    EXPECT_EQ(l.experts, c.experts) << c.text;
    EXPECT_EQ(format_layout(l), c.plain) << c.text;
    EXPECT_EQ(format_layout_with_order(l), c.with_order) << c.text;
    EXPECT_EQ(parse_layout(format_layout_with_order(l)), l) << c.text;
    Layout same_sizes = l;
    same_sizes.experts = 1;
    EXPECT_EQ(parse_layout(format_layout_with_order(same_sizes)), same_sizes) << c.text;
  }
  EXPECT_EQ(parse_layout("4x2x1x1").experts, 1);
  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : {Bad{"4x1x1x1e0", "expert parallelism 'e0' is not a positive integer"},
                       Bad{"4x1x1x1e", "expert parallelism 'e' is not a positive integer"},
                       Bad{"4x1x1x1ex", "expert parallelism 'ex' is not a positive integer"},
                       Bad{"4x1x1x1e-2", "expert parallelism 'e-2' is not a positive integer"},
                       Bad{"4x1x1x1e2e2", "expert parallelism 'e2e2' is not a positive integer"},
                       Bad{"4x1x1x1e3", "expert parallelism 3 does not divide the data axis 4"},
                       Bad{"2x2x1x1e4:yxzd", "expert parallelism 4 does not divide the data axis 2"}}) {
    try {
      const Layout l = parse_layout(b.text);
      ADD_FAILURE() << "accepted '" << b.text << "' as " << format_layout_with_order(l);
    } catch (const LayoutError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("layout '") + b.text + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
    }
  }
}

// The expert axis groups E_p consecutive data coordinates (the other coordinates fixed); the
// expert_data axis the G_data / E_p ranks with the same data coordinate mod E_p. Each axis's
// groups partition the world, lie E_p (or G_data / E_p) neighbours along data apart by
// comm_stride, inside an aligned block of comm_stride·comm_size ranks, in any axis order.
TEST(Layout, ExpertGroupsAreConsecutiveDataCoordinatesAndPartitionTheWorld) {
  for (const char* text : {"8x2x1x1e4", "8x2x1x1e4:dzyx", "8x1x2x1e2:yxzd", "6x2x1x2e3:zdxy", "4x2x1x1e4:xdyz"}) {
    const Layout l = parse_layout(text);
    const int stride = l.stride(Axis::data);
    EXPECT_EQ(l.comm_size(CommAxis::expert), l.experts) << text;
    EXPECT_EQ(l.comm_size(CommAxis::expert_data), l.data / l.experts) << text;
    EXPECT_EQ(l.comm_stride(CommAxis::expert), stride) << text;
    EXPECT_EQ(l.comm_stride(CommAxis::expert_data), stride * l.experts) << text;
    for (CommAxis axis : {CommAxis::expert, CommAxis::expert_data}) {
      const bool expert = axis == CommAxis::expert;
      const int size = l.comm_size(axis), step = l.comm_stride(axis);
      std::set<std::vector<int>> groups;
      for (int r = 0; r < l.world(); ++r) {
        const std::vector<int> g = l.comm_group(axis, r);
        ASSERT_EQ(static_cast<int>(g.size()), size) << text << " " << comm_axis_name(axis) << " rank " << r;
        EXPECT_NE(std::find(g.begin(), g.end(), r), g.end()) << text << " rank " << r;
        const Coords mine = l.coords(r);
        const int first = expert ? mine.data - mine.data % l.experts : mine.data % l.experts;
        for (size_t i = 0; i < g.size(); ++i) {
          Coords expect = mine;
          expect.data = first + static_cast<int>(i) * (expert ? 1 : l.experts);
          EXPECT_EQ(l.coords(g[i]), expect) << text << " " << comm_axis_name(axis) << " rank " << r;
          EXPECT_EQ(l.comm_group(axis, g[i]), g) << text << " rank " << g[i];
          if (i > 0) {
            EXPECT_EQ(g[i] - g[i - 1], step) << text << " " << comm_axis_name(axis);
          }
        }
        const int block = step * size;
        EXPECT_EQ(g.front() / block, g.back() / block) << text << " " << comm_axis_name(axis) << " rank " << r;
        groups.insert(g);
      }
      EXPECT_EQ(static_cast<int>(groups.size()), l.world() / size) << text << " " << comm_axis_name(axis);
      std::multiset<int> covered;
      for (const auto& g : groups) covered.insert(g.begin(), g.end());
      EXPECT_EQ(covered.size(), static_cast<size_t>(l.world())) << text;
      EXPECT_EQ(std::set<int>(covered.begin(), covered.end()).size(), static_cast<size_t>(l.world())) << text;
    }
  }
  // E_p = G_data: the expert groups are the data groups, and expert_data has nothing to cut.
  const Layout whole = parse_layout("4x2x1x1e4:dxyz");
  for (int r = 0; r < whole.world(); ++r) {
    EXPECT_EQ(whole.comm_group(CommAxis::expert, r), whole.group(Axis::data, r));
    EXPECT_EQ(whole.comm_group(CommAxis::expert_data, r), std::vector<int>{r});
  }
}

// Without expert parallelism there is no cut of the data axis: both expert axes are single
// ranks, whatever the sizes and the order.
TEST(Layout, WithoutExpertParallelismBothExpertAxesAreSingleRanks) {
  for (const char* text : {"1x1x1x1", "8x1x1x1", "4x2x1x1:dzyx", "2x2x3x2:yxzd"}) {
    const Layout l = parse_layout(text);
    ASSERT_EQ(l.experts, 1) << text;
    for (CommAxis axis : {CommAxis::expert, CommAxis::expert_data}) {
      EXPECT_EQ(l.comm_size(axis), 1) << text << " " << comm_axis_name(axis);
      for (int r = 0; r < l.world(); ++r) EXPECT_EQ(l.comm_group(axis, r), std::vector<int>{r}) << text;
    }
  }
}

// A layout's expert parallelism against the model: E_p > 1 needs experts, and E_p must divide
// them. divisibility_problem reports it after the model dimensions, naming the fix.
TEST(Layout, ExpertParallelismMustSuitTheModel) {
  ModelShape dense;
  BatchShape batch;  // global batch 8: divisible by every G_data*G_z below
  const Layout e4 = parse_layout("8x1x1x1e4");
  EXPECT_FALSE(expert_parallelism_fits(dense, e4));
  EXPECT_EQ(expert_problem(dense, e4),
            "e4 asks for expert parallelism 4 but the model is dense; set model.experts or drop 'e4'");
  EXPECT_EQ(divisibility_problem(dense, batch, e4), expert_problem(dense, e4));
  const Indivisible bad = first_indivisible(dense, batch, e4);
  EXPECT_EQ(bad.check, kExpertCheck);
  EXPECT_EQ(bad.ways, 4);
  EXPECT_EQ(divisibility_problem(dense, batch, parse_layout("8x1x1x1")), "");

  ModelShape moe;
  moe.experts = 6;
  EXPECT_EQ(expert_problem(moe, e4),
            "e4 asks for expert parallelism 4, which does not divide model.experts = 6; use one that divides both 6 "
            "and G_data = 8 (e2), or drop 'e4'");
  moe.experts = 12;
  EXPECT_EQ(expert_problem(moe, parse_layout("8x1x1x1e8")),
            "e8 asks for expert parallelism 8, which does not divide model.experts = 12; use one that divides both "
            "12 and G_data = 8 (e2, e4), or drop 'e8'");
  moe.experts = 3;
  EXPECT_EQ(expert_problem(moe, parse_layout("4x2x1x1e4:yxzd")),
            "e4 asks for expert parallelism 4, which does not divide model.experts = 3; no expert parallelism above 1 "
            "divides both 3 and G_data = 4: drop 'e4'");
  moe.experts = 8;
  for (const char* fits : {"8x1x1x1e4", "8x1x1x1e8", "8x1x1x1e2:dzyx", "8x1x1x1"}) {
    EXPECT_TRUE(expert_parallelism_fits(moe, parse_layout(fits))) << fits;
    EXPECT_EQ(divisibility_problem(moe, batch, parse_layout(fits)), "") << fits;
    EXPECT_EQ(first_indivisible(moe, batch, parse_layout(fits)).check, -1) << fits;
  }
  // A model dimension that does not divide is named first.
  EXPECT_EQ(divisibility_problem(dense, batch, parse_layout("2x3x1x1e2")), "hidden=64 is not divisible by G_x*G_z=3");
}

TEST(Layout, AProductPastIntMaxIsRefusedNotWrapped) {
  // 46340^2 fits an int; 46341^2 does not, nor does the product of four 2^31-1 (not even an int64_t).
  EXPECT_EQ(parse_layout("46340x46340x1x1").world(), 2147395600);
  for (const char* big : {"46341x46341x1x1", "65536x65536x1x1:xyzd", "2147483647x2147483647x2147483647x2147483647"}) {
    try {
      const Layout l = parse_layout(big);
      ADD_FAILURE() << "accepted '" << big << "' as a layout of " << l.world() << " ranks";
    } catch (const LayoutError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(std::string("layout '") + big +
                                                "': the product of its sizes exceeds 2147483647 ranks",
                                            0),
                0u)
          << e.what();
    }
  }
}

// Number of ordered 4-factorizations: product over primes p^e of C(e+3, 3).
int64_t ordered_factorizations(int n) {
  int64_t count = 1;
  for (int p = 2; n > 1; ++p) {
    int e = 0;
    while (n % p == 0) n /= p, ++e;
    count *= int64_t{e + 3} * (e + 2) * (e + 1) / 6;
  }
  return count;
}

TEST(LayoutSearch, EnumeratesEveryFactorizationTimesEveryOrder) {
  for (int world : {1, 2, 6, 8, 12, 36, 64, 96, 4096}) {
    const auto all = enumerate_layouts(world);
    EXPECT_EQ(static_cast<int64_t>(all.size()), ordered_factorizations(world) * 24) << world;
    std::set<std::string> unique;
    for (const auto& l : all) {
      EXPECT_EQ(l.world(), world);
      unique.insert(format_layout_with_order(l));
    }
    EXPECT_EQ(unique.size(), all.size());
  }
}

// A tiny model whose volumes are computed by hand below.
ChooserInput tiny_input() {
  ChooserInput in;
  in.model = {1, 8, 2, 16, 4};  // L=1, C=8, H=2, V=16, T=4
  in.batch = {4, 1, ElementType::float32};
  in.machine.nodes = 1;
  in.machine.tasks_per_node = 4;
  in.machine.intra_node = {1e10, 1e-6};
  in.machine.inter_node = {1e9, 1e-5};
  return in;
}

TEST(LayoutVolume, HandComputedWithDataXAndZ) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("2x2x1x2");  // data 2, x 2, y 1, z 2
  // b = 4/(2*2) = 1 sequence, mb = 1, A = 1, m = 4 tokens, e = 4 bytes.
  const StepVolume v = predict_step_volume(in, l);
  using K = CollectiveKind;
  // k_local*n_local*e per linear: qkv 4*24*4=384, proj 8*4*4=128, fc 4*32*4=512,
  // mlp.proj 32*4*4=512, lm_head 4*16*4=256 -> 1792 in 5 calls, gathered and scattered over z.
  EXPECT_EQ(v.at(CommAxis::z, K::all_gather).calls, 5);
  EXPECT_EQ(v.at(CommAxis::z, K::all_gather).bytes, 1792);
  EXPECT_EQ(v.at(CommAxis::z, K::reduce_scatter).bytes, 1792);
  // x all-reduces: forward Y of xy layers (m*n_local*e: qkv 384, fc 512, head 256) and
  // backward dX of yx layers (m*k_local*e: proj 128, mlp.proj 512) = 1792 in 5 calls;
  // 3 LayerNorms x (2 forward calls of m*4 = 16 + 1 backward call of m*2*4 = 32) = 96+96.
  EXPECT_EQ(v.at(CommAxis::x, K::all_reduce).calls, 5 + 6 + 3);
  EXPECT_EQ(v.at(CommAxis::x, K::all_reduce).bytes, 1792 + 96 + 96);
  // y is a group of one: nothing.
  EXPECT_EQ(v.bytes(CommAxis::y), 0);
  // small = L*(6C/G_x + 7C/G_y) + 2C/G_x + T*C/G_x = 80 + 8 + 16 = 104 elements;
  // big = (192 + 64 + 256 + 256 + 128) / (G_x*G_y*G_z = 4) = 224 elements.
  EXPECT_EQ(parameters_per_rank(in.model, l).small, 104);
  EXPECT_EQ(parameters_per_rank(in.model, l).big, 224);
  EXPECT_EQ(v.at(CommAxis::z, K::all_reduce).bytes, 104 * 4);
  // Over data in L + 2 = 3 buckets: the block's weights (192 + 64 + 256 + 256) / 4 = 192, wte
  // 128 / 4 = 32, the small 104: together every gradient once.
  EXPECT_EQ(v.at(CommAxis::data, K::all_reduce).bytes, (224 + 104) * 4);
  EXPECT_EQ(v.at(CommAxis::data, K::all_reduce).calls, 3);
  // loss, tokens, norm, stop votes, and each of the 8 ranks' busy seconds (the straggler watch)
  EXPECT_EQ(v.at(CommAxis::world, K::all_reduce).bytes, 4 * (4 + 8));
  // Wire bytes: all-reduce factor 2(n-1)/n = 1 for n = 2.
  EXPECT_DOUBLE_EQ(v.wire_bytes(CommAxis::data), 1312.0);
}

// Under bfloat16 the weights (z all-gathers) and activations (x, y all-reduces) move in 2
// bytes; gradients (z reduce-scatters and all-reduces, data) and statistics stay float32.
TEST(LayoutVolume, Bfloat16HalvesWeightsAndActivationsNotGradients) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("2x2x1x2");
  const StepVolume f32 = predict_step_volume(in, l);
  in.batch.dtype = ElementType::bfloat16;
  const StepVolume bf16 = predict_step_volume(in, l);
  using K = CollectiveKind;
  EXPECT_EQ(bf16.at(CommAxis::z, K::all_gather).bytes, 1792 / 2);
  EXPECT_EQ(bf16.at(CommAxis::z, K::reduce_scatter).bytes, 1792);
  EXPECT_EQ(bf16.at(CommAxis::z, K::all_reduce).bytes, 104 * 4);
  EXPECT_EQ(bf16.at(CommAxis::x, K::all_reduce).bytes, 1792 / 2 + 96 + 96);  // LayerNorm statistics stay
  EXPECT_EQ(bf16.at(CommAxis::data, K::all_reduce).bytes, f32.at(CommAxis::data, K::all_reduce).bytes);
  EXPECT_EQ(bf16.at(CommAxis::world, K::all_reduce).bytes, 4 * (4 + 8));  // float32 statistics either way
}

TEST(LayoutVolume, HandComputedWithYAndAccumulation) {
  const ChooserInput in = tiny_input();
  const Layout l = parse_layout("1x1x2x1");  // y = 2: b = 4, mb = 1, A = 4, m = 4
  const StepVolume v = predict_step_volume(in, l);
  using K = CollectiveKind;
  // y all-reduces per micro-batch: backward dX of xy layers (m*k_local*e: qkv 4*8*4,
  // fc 4*8*4, head 4*8*4) and forward Y of yx layers (m*n_local*e: proj 4*8*4,
  // mlp.proj 4*8*4) = 5*128; embedding m*C/G_x*e = 128; loss m*2*4 = 32. Times A = 4.
  EXPECT_EQ(v.at(CommAxis::y, K::all_reduce).calls, 4 * 7);
  EXPECT_EQ(v.at(CommAxis::y, K::all_reduce).bytes, 4 * (5 * 128 + 128 + 32));
  // loss row maxima: m*G_y*4 = 32 gathered per micro-batch.
  EXPECT_EQ(v.at(CommAxis::y, K::all_gather).bytes, 4 * 32);
  EXPECT_EQ(v.bytes(CommAxis::x), 0);
  EXPECT_EQ(v.bytes(CommAxis::z), 0);
  EXPECT_EQ(batch_split(in.model, in.batch, l).accumulation, 4);
}

TEST(LayoutMemory, FilterRejectsWithTheNumbers) {
  ChooserInput in = tiny_input();
  in.recompute = Recompute::none;
  in.shard_optimizer = false;
  const Layout l = parse_layout("4x1x1x1");
  const double need = static_cast<double>(estimate_memory(in, l).total());
  in.machine.memory_headroom = 0;
  in.machine.memory_bytes = need * 0.99;
  const std::string why = rejection_reason(in, l);
  EXPECT_NE(why.find("does not fit in memory: needs"), std::string::npos) << why;
  EXPECT_NE(why.find("(training.recompute = none, training.shard_optimizer = false)"), std::string::npos) << why;
  // With the sharding left to "auto", the optimizer sharded over the 4 data ranks fits.
  in.shard_optimizer.reset();
  EXPECT_EQ(rejection_reason(in, l), "");
  EXPECT_TRUE(resolved_modes(in, l).shard_optimizer);
  in.shard_optimizer = false;
  in.machine.memory_bytes = need * 1.01;
  EXPECT_EQ(rejection_reason(in, l), "");
}

// Memory copies take host memory, five shares of 12 bytes a parameter over the world, and
// leave the GPU's (total()) as it was.
TEST(LayoutMemory, MemoryCopiesAreHostMemoryOfFiveShares) {
  ChooserInput in = tiny_input();
  in.model = {4, 256, 8, 512, 64};
  in.batch = {8, 1, ElementType::float32};
  const Layout l = parse_layout("2x2x1x1");
  const MemoryEstimate without = estimate_memory(in, l);
  in.memory_copies = true;
  const MemoryEstimate with = estimate_memory(in, l);
  EXPECT_EQ(without.memory_copies, 0);
  EXPECT_EQ(with.total(), without.total());
  EXPECT_EQ(with.memory_copies, 5 * ((parameters_total(in.model) * 12 + 3) / 4));
  EXPECT_NE(memory_formula(in, l).find("memory copies     5 * 12 P / world"), std::string::npos);
}

TEST(LayoutMemory, ZShardingShrinksParametersButKeepsGatheredWeights) {
  ChooserInput in = tiny_input();
  in.model = {4, 256, 8, 512, 64};
  in.batch = {8, 1, ElementType::float32};
  const MemoryEstimate flat = estimate_memory(in, parse_layout("1x1x1x1"));
  const MemoryEstimate zed = estimate_memory(in, parse_layout("1x1x1x4"));
  EXPECT_LT(zed.parameters, flat.parameters / 3);
  EXPECT_GT(zed.gathered_weights, 0);
  EXPECT_EQ(flat.gathered_weights, 0);
}

// Recomputation reruns L - 1 blocks per micro-batch (model_plan.hpp); what each rerun moves,
// by hand. L = 3, C = 8, H = 2, V = 16, T = 4 at 1x2x2x2: b = 2, mb = 1, A = 2, m = 4, e = 4,
// so 4 reruns per step. Gathered blocks k/G_a * n/G_b: qkv 4*12 = 48, proj 4*4 = 16,
// fc 4*16 = 64, mlp.proj 16*4 = 64: 192 elements, 768 bytes.
TEST(LayoutVolume, RecomputationAddsItsRerunCollectivesByHand) {
  ChooserInput in = tiny_input();
  in.model.layers = 3;
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("1x2x2x2");
  const StepVolume none = predict_step_volume(in, l, Recompute::none);
  const StepVolume attention = predict_step_volume(in, l, Recompute::attention);
  const StepVolume block = predict_step_volume(in, l, Recompute::block);
  using K = CollectiveKind;
  struct Added {
    CommAxis axis;
    K kind;
    int64_t calls, bytes;
  };
  const auto expect_added = [&](const StepVolume& got, const std::vector<Added>& added, const char* what) {
    for (int a = 0; a < kCommAxisCount; ++a)
      for (int k = 0; k < kCollectiveKindCount; ++k) {
        const auto axis = static_cast<CommAxis>(a);
        const auto kind = static_cast<K>(k);
        int64_t calls = 0, bytes = 0;
        for (const Added& x : added)
          if (x.axis == axis && x.kind == kind) calls = x.calls, bytes = x.bytes;
        EXPECT_EQ(got.at(axis, kind).calls - none.at(axis, kind).calls, calls)
            << what << " " << comm_axis_name(axis) << " " << collective_name(kind);
        EXPECT_EQ(got.at(axis, kind).bytes - none.at(axis, kind).bytes, bytes)
            << what << " " << comm_axis_name(axis) << " " << collective_name(kind);
      }
  };
  // attention: the qkv GEMM's x all-reduce, m * 3C/G_y * e = 4*12*4 = 192 bytes, 4 times.
  expect_added(attention, {{CommAxis::x, K::all_reduce, 4, 4 * 192}}, "attention");
  // block: the four gathers again (4 x 768 bytes in 16 calls); the rerun GEMMs' all-reduces,
  // over x for qkv (192) and fc (m * 16 * 4 = 256) and over y for proj (m * 4 * 4 = 64); ln1
  // and ln2 forward, 4 calls of m * 4 = 16 bytes over x.
  expect_added(block,
               {{CommAxis::z, K::all_gather, 16, 4 * 768},
                {CommAxis::x, K::all_reduce, 4 * 2 + 4 * 4, 4 * (192 + 256) + 4 * 4 * 16},
                {CommAxis::y, K::all_reduce, 4, 4 * 64}},
               "block");
  // One layer: nothing to rerun, nothing added.
  in.model.layers = 1;
  const StepVolume one = predict_step_volume(in, l, Recompute::block);
  for (int a = 0; a < kCommAxisCount; ++a)
    EXPECT_EQ(one.bytes(static_cast<CommAxis>(a)),
              predict_step_volume(in, l, Recompute::none).bytes(static_cast<CommAxis>(a)));
}

// What each mode keeps, by hand. L = 4, C = 64, H = 4, V = 128, T = 16, batch 8 in
// micro-batches of 2 at 1x2x2x2: m = 32. Per block: input m C/G_x = 1024; attention
// 4 m C/G_y + mb (H/G_y) T = 4096 + 64 = 4160; the rest 3 m C/G_x + 8 m C/G_y = 3072 + 8192
// = 11264; the head 2 m C/G_x + m V/G_y = 4096. Gathered, per block: qkv 32*96, proj 32*32,
// fc 32*128, mlp.proj 128*32 = 12288; the head 32*64 = 2048.
TEST(LayoutMemory, EachRecomputeModeKeepsWhatItSaysByHand) {
  ChooserInput in = tiny_input();
  in.model = {4, 64, 4, 128, 16};
  in.batch = {8, 2, ElementType::float32};
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("1x2x2x2");
  const MemoryEstimate none = estimate_memory(in, l, Recompute::none);
  const MemoryEstimate attention = estimate_memory(in, l, Recompute::attention);
  const MemoryEstimate block = estimate_memory(in, l, Recompute::block);
  EXPECT_EQ(none.activations, 4 * (4 * (1024 + 4160 + 11264) + 4096));
  EXPECT_EQ(attention.activations, 4 * (4 * (1024 + 11264) + 4160 + 4096));
  EXPECT_EQ(block.activations, 4 * (4 * 1024 + 4160 + 11264 + 4096));
  EXPECT_EQ(none.gathered_weights, 4 * (4 * 12288 + 2048));
  EXPECT_EQ(attention.gathered_weights, none.gathered_weights);
  EXPECT_EQ(block.gathered_weights, 4 * (2 * 12288 + 2048));  // overlap: two blocks' at a time
  in.overlap_comm = false;
  EXPECT_EQ(estimate_memory(in, l, Recompute::block).gathered_weights, 4 * (12288 + 2048));
  EXPECT_EQ(estimate_memory(in, l, Recompute::none).gathered_weights, none.gathered_weights);
  for (const MemoryEstimate* m : {&attention, &block}) {
    EXPECT_EQ(m->parameters, none.parameters);
    EXPECT_EQ(m->optimizer, none.optimizer);
    EXPECT_EQ(m->gathered_grad, none.gathered_grad);
    EXPECT_EQ(m->workspace, none.workspace);
  }
  EXPECT_EQ(block.recompute, Recompute::block);
}

// The FLOPs each mode adds, by hand, on the model above (A = 2 micro-batches, 3 reruns each):
// attention reruns qkv, 2 m (C/G_x)(3C/G_y) = 2*32*32*96, and the attention forward,
// 4 mb (H/G_y) T^2 d = 4*2*2*256*16; block adds proj 2*32*32*32 and fc 2*32*32*128.
TEST(LayoutCost, RecomputationAddsItsForwardFlopsToCompute) {
  ChooserInput in = tiny_input();
  in.model = {4, 64, 4, 128, 16};
  in.batch = {8, 2, ElementType::float32};
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("1x2x2x2");
  const double qkv = 2.0 * 32 * 32 * 96, attend = 4.0 * 2 * 2 * 256 * 16;
  const double proj = 2.0 * 32 * 32 * 32, fc = 2.0 * 32 * 32 * 128;
  EXPECT_EQ(recompute_flops_per_rank(in, l, Recompute::none), 0.0);
  EXPECT_DOUBLE_EQ(recompute_flops_per_rank(in, l, Recompute::attention), 2 * 3 * (qkv + attend));
  EXPECT_DOUBLE_EQ(recompute_flops_per_rank(in, l, Recompute::block), 2 * 3 * (qkv + attend + proj + fc));
  for (Recompute mode : kRecomputeModes) {
    const CostEstimate c = estimate_cost(in, l, predict_step_volume(in, l, mode), mode);
    EXPECT_EQ(c.recompute, mode);
    EXPECT_DOUBLE_EQ(c.flops, flops_per_rank(in, l)) << "the model's FLOPs, what MFU counts";
    EXPECT_DOUBLE_EQ(c.compute_s, (c.flops + recompute_flops_per_rank(in, l, mode)) /
                                      (in.machine.peak_flops * in.machine.compute_efficiency));
  }
}

// "auto" takes, per layout, the least recomputation that fits, and the chooser prices it.
TEST(LayoutSearch, AutoRecomputeIsTheLeastThatFitsPerLayout) {
  ChooserInput in = tiny_input();
  in.model = {4, 64, 4, 128, 16};
  in.batch = {8, 2, ElementType::float32};
  in.machine.tasks_per_node = 8;
  in.machine.memory_headroom = 0;
  const Layout l = parse_layout("1x2x2x2");
  const double none = static_cast<double>(estimate_memory(in, l, Recompute::none).total());
  const double attention = static_cast<double>(estimate_memory(in, l, Recompute::attention).total());
  const double block = static_cast<double>(estimate_memory(in, l, Recompute::block).total());
  ASSERT_GT(none, attention);
  ASSERT_GT(attention, block);
  const std::vector<std::pair<double, Recompute>> cases = {
      {none, Recompute::none}, {none - 1, Recompute::attention}, {attention - 1, Recompute::block}};
  for (const auto& [bytes, want] : cases) {
    in.machine.memory_bytes = bytes;
    EXPECT_EQ(resolved_recompute(in, l), want) << bytes;
    EXPECT_EQ(estimate_memory(in, l).recompute, want);
    EXPECT_EQ(evaluate_layout(in, l).recompute, want);
    EXPECT_NE(recompute_reason(in, l).find(std::string(recompute_name(want)) + " fits"), std::string::npos)
        << recompute_reason(in, l);
    EXPECT_EQ(rejection_reason(in, l), "");
  }
  in.machine.memory_bytes = block - 1;
  EXPECT_EQ(resolved_recompute(in, l), Recompute::block);
  EXPECT_NE(rejection_reason(in, l).find("does not fit in memory: needs"), std::string::npos);
  EXPECT_NE(rejection_reason(in, l).find("even with recompute block"), std::string::npos) << rejection_reason(in, l);
  // A job that names a mode gets it, fitting or not.
  in.recompute = Recompute::attention;
  in.machine.memory_bytes = none;
  EXPECT_EQ(resolved_recompute(in, l), Recompute::attention);
  EXPECT_EQ(recompute_reason(in, l), "training.recompute = attention");

  // Among layouts: with memory for this one only by recomputing blocks, the chooser ranks the
  // layouts that fit, each at its own mode, and says what the runner-ups recompute.
  in.recompute.reset();
  in.machine.memory_bytes = attention - 1;
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  std::set<Recompute> modes;
  for (const Candidate& c : r.ranked) {
    modes.insert(c.recompute);
    EXPECT_EQ(c.recompute, resolved_recompute(in, c.layout)) << format_layout(c.layout);
    EXPECT_EQ(c.memory.recompute, c.recompute);
    EXPECT_EQ(c.cost.recompute, c.recompute);
    if (c.recompute != r.best().recompute) {
      EXPECT_NE(c.why_lost.find(std::string("; recompute ") + recompute_name(c.recompute) + " vs "), std::string::npos)
          << c.why_lost;
    }
  }
  EXPECT_GT(modes.size(), 1u) << "the memory above should leave several modes among the layouts";
  EXPECT_NE(format_ranked_table(r, 100).find(" block "), std::string::npos);
  const std::string explain = format_explain(r, 100);
  EXPECT_NE(explain.find(std::string("), recompute ") + recompute_name(r.best().recompute)), std::string::npos)
      << explain;
  EXPECT_NE(explain.find("  recompute         auto: "), std::string::npos) << explain;
}

// The optimizer sharded over data: per bucket (L blocks, wte, the small tensors) a
// reduce-scatter and an all-gather of the bucket padded to G_data pieces instead of one
// all-reduce. In a float32 job that is the all-reduce's bytes in two halves (exactly when
// every bucket divides), the same wire bytes and ring steps, so the same time; with padding
// at most G_data - 1 elements more per bucket; bfloat16 halves the weight buckets' gathers.
TEST(LayoutVolume, ShardedOptimizerMovesTheAllReducesBytesInTwoHalves) {
  ChooserInput in = tiny_input();
  in.model = {2, 64, 4, 128, 16};
  in.batch = {12, 1, ElementType::float32};
  in.machine.tasks_per_node = 4;
  using K = CollectiveKind;
  const Layout four = parse_layout("4x1x1x1");
  const GradientBuckets b = gradient_buckets(in.model, four);
  // Per block 12 C^2 = 49152; wte V C = 8192; small L (6C + 7C) + 2C + T C = 2816: all divide by 4.
  ASSERT_EQ(b.block, 49152);
  ASSERT_EQ(b.wte, 8192);
  ASSERT_EQ(b.small, 2816);
  const int64_t all = 2 * b.block + b.wte + b.small;
  const StepVolume plain = predict_step_volume(in, four, {Recompute::none, false});
  const StepVolume sharded = predict_step_volume(in, four, {Recompute::none, true});
  EXPECT_EQ(plain.at(CommAxis::data, K::all_reduce).calls, 4);
  EXPECT_EQ(plain.at(CommAxis::data, K::all_reduce).bytes, all * 4);
  EXPECT_EQ(sharded.at(CommAxis::data, K::all_reduce).calls, 0);
  EXPECT_EQ(sharded.at(CommAxis::data, K::reduce_scatter).calls, 4);
  EXPECT_EQ(sharded.at(CommAxis::data, K::reduce_scatter).bytes, all * 4);
  EXPECT_EQ(sharded.at(CommAxis::data, K::all_gather).calls, 4);
  EXPECT_EQ(sharded.at(CommAxis::data, K::all_gather).bytes, all * 4);
  EXPECT_DOUBLE_EQ(sharded.wire_bytes(CommAxis::data), plain.wire_bytes(CommAxis::data));
  for (CommAxis a : {CommAxis::x, CommAxis::y, CommAxis::z, CommAxis::world})
    EXPECT_EQ(sharded.bytes(a), plain.bytes(a)) << comm_axis_name(a);
  const CostEstimate plain_cost = estimate_cost(in, four, plain, {Recompute::none, false});
  const CostEstimate sharded_cost = estimate_cost(in, four, sharded, {Recompute::none, true});
  EXPECT_DOUBLE_EQ(sharded_cost.comm_s[static_cast<size_t>(CommAxis::data)],
                   plain_cost.comm_s[static_cast<size_t>(CommAxis::data)]);
  EXPECT_DOUBLE_EQ(sharded_cost.step_s(), plain_cost.step_s());

  // G_data = 3: wte and the small tensors pad to 8193 and 2817.
  in.machine.tasks_per_node = 3;
  const Layout three = parse_layout("3x1x1x1");
  const StepVolume padded = predict_step_volume(in, three, {Recompute::none, true});
  EXPECT_EQ(padded.at(CommAxis::data, K::reduce_scatter).bytes, (2 * 49152 + 8193 + 2817) * 4);
  EXPECT_EQ(padded.at(CommAxis::data, K::all_gather).bytes, (2 * 49152 + 8193 + 2817) * 4);
  // bfloat16: the weight buckets' all-gathers move the bf16 copy, the small tensors float32.
  in.machine.tasks_per_node = 4;
  in.batch.dtype = ElementType::bfloat16;
  const StepVolume bf16 = predict_step_volume(in, four, {Recompute::none, true});
  EXPECT_EQ(bf16.at(CommAxis::data, K::reduce_scatter).bytes, all * 4);
  EXPECT_EQ(bf16.at(CommAxis::data, K::all_gather).bytes, (2 * b.block + b.wte) * 2 + b.small * 4);
  // G_data = 1: nothing to shard, the same volume either way.
  in.machine.tasks_per_node = 2;
  const Layout one = parse_layout("1x2x1x1");
  EXPECT_EQ(predict_step_volume(in, one, {Recompute::none, true}).bytes(CommAxis::data), 0);
  EXPECT_EQ(estimate_memory(in, one, {Recompute::none, true}).total(),
            estimate_memory(in, one, {Recompute::none, false}).total());
}

// Sharded, a rank keeps the AdamW moments (and in bfloat16 the float32 master weights) of its
// piece of every bucket: 1/G_data of them; the parameters and gradients stay whole (padded).
TEST(LayoutMemory, ShardedOptimizerKeepsOnePieceOfTheMomentsAndMasterWeights) {
  ChooserInput in = tiny_input();
  in.model = {2, 64, 4, 128, 16};
  in.batch = {12, 1, ElementType::float32};
  in.machine.tasks_per_node = 4;
  const Layout four = parse_layout("4x1x1x1");
  const int64_t P = parameters_per_rank(in.model, four).total();  // 109312, divisible by 4 per bucket
  for (ElementType dtype : {ElementType::float32, ElementType::bfloat16}) {
    in.batch.dtype = dtype;
    const MemoryEstimate plain = estimate_memory(in, four, {Recompute::none, false});
    const MemoryEstimate sharded = estimate_memory(in, four, {Recompute::none, true});
    EXPECT_FALSE(plain.shard_optimizer);
    EXPECT_TRUE(sharded.shard_optimizer);
    EXPECT_EQ(sharded.parameters, plain.parameters);
    const int64_t per_element = dtype == ElementType::float32 ? 8 : 12;  // m and v, and the master
    EXPECT_EQ(plain.optimizer - sharded.optimizer, per_element * (P - P / 4)) << element_type_name(dtype);
    EXPECT_EQ(plain.total() - sharded.total(), per_element * (P - P / 4));
  }
  // With padding (G_data = 3) the parameters and gradients grow by the padding.
  in.batch.dtype = ElementType::float32;
  in.machine.tasks_per_node = 3;
  const Layout three = parse_layout("3x1x1x1");
  const ShardedCount c = sharded_count(in.model, three, true);
  EXPECT_EQ(c.stored, P + 1 + 1);  // wte and the small tensors pad by one each
  EXPECT_EQ(c.owned, 2 * (49152 / 3) + 8193 / 3 + 2817 / 3);
  const MemoryEstimate padded = estimate_memory(in, three, {Recompute::none, true});
  EXPECT_EQ(padded.parameters, c.stored * 4);
  EXPECT_EQ(padded.optimizer, c.stored * 4 + c.owned * 8);
}

// "auto" shards a layout's optimizer where that is what makes it fit, or fit with less
// recomputation (sharding costs no time in the model, recomputation does), and not where it
// fits anyway (the all-gather after the step is exposed); the job's own setting wins; with
// G_data = 1 there is nothing to shard. Each choice says why, and the chooser reports it.
TEST(LayoutSearch, AutoShardsTheOptimizerWhereThatMakesALayoutFitOrRecomputeLess) {
  ChooserInput in = tiny_input();
  in.model = {4, 64, 4, 128, 16};
  in.batch = {8, 2, ElementType::float32};
  in.machine.tasks_per_node = 4;
  in.machine.memory_headroom = 0;
  const Layout l = parse_layout("4x1x1x1");
  auto need = [&](Recompute r, bool shard) { return static_cast<double>(estimate_memory(in, l, {r, shard}).total()); };
  ASSERT_GT(need(Recompute::none, false), need(Recompute::none, true));
  ASSERT_GT(need(Recompute::none, true), need(Recompute::attention, true));
  // Enough for everything: unsharded, and why not.
  in.machine.memory_bytes = need(Recompute::none, false);
  EXPECT_EQ(resolved_modes(in, l), MemoryModes(Recompute::none, false));
  EXPECT_NE(shard_reason(in, l).find("auto: off: unsharded fits at recompute none"), std::string::npos)
      << shard_reason(in, l);
  // Not enough unsharded: sharded, still without recomputation.
  in.machine.memory_bytes = need(Recompute::none, false) - 1;
  ASSERT_GE(in.machine.memory_bytes, need(Recompute::none, true));
  EXPECT_EQ(resolved_modes(in, l), MemoryModes(Recompute::none, true));
  EXPECT_NE(shard_reason(in, l).find("auto: on: at recompute none the optimizer unsharded needs "), std::string::npos)
      << shard_reason(in, l);
  EXPECT_NE(recompute_reason(in, l).find("none fits sharded: "), std::string::npos) << recompute_reason(in, l);
  EXPECT_TRUE(estimate_memory(in, l).shard_optimizer);
  EXPECT_TRUE(evaluate_layout(in, l).shard_optimizer);
  EXPECT_EQ(predict_step_volume(in, l).at(CommAxis::data, CollectiveKind::all_reduce).calls, 0);
  // Not even sharded without recomputation: the first of attention unsharded, attention
  // sharded, block unsharded, block sharded that fits.
  in.machine.memory_bytes = need(Recompute::none, true) - 1;
  const std::vector<MemoryModes> order = {
      {Recompute::attention, false}, {Recompute::attention, true}, {Recompute::block, false}, {Recompute::block, true}};
  const auto first = std::find_if(order.begin(), order.end(), [&](const MemoryModes& m) {
    return need(m.recompute, m.shard_optimizer) <= in.machine.memory_bytes;
  });
  ASSERT_NE(first, order.end());
  EXPECT_EQ(resolved_modes(in, l), *first);
  EXPECT_NE(recompute_reason(in, l).find("none needs "), std::string::npos) << recompute_reason(in, l);
  EXPECT_NE(recompute_reason(in, l).find(" sharded, "), std::string::npos) << recompute_reason(in, l);
  // Nothing fits: rejected at the least memory, block and sharded.
  in.machine.memory_bytes = need(Recompute::block, true) - 1;
  EXPECT_EQ(resolved_modes(in, l), MemoryModes(Recompute::block, true));
  EXPECT_NE(rejection_reason(in, l).find("even with recompute block and the optimizer sharded, the least memory"),
            std::string::npos)
      << rejection_reason(in, l);

  // The job's setting wins, fitting or not; G_data = 1 has nothing to shard.
  in.machine.memory_bytes = need(Recompute::none, false) - 1;
  in.shard_optimizer = false;
  EXPECT_FALSE(resolved_modes(in, l).shard_optimizer);
  EXPECT_EQ(shard_reason(in, l), "training.shard_optimizer = false");
  in.shard_optimizer = true;
  in.machine.memory_bytes = 1e12;
  EXPECT_EQ(resolved_modes(in, l), MemoryModes(Recompute::none, true));
  const Layout tensor_only = parse_layout("1x2x1x2");
  EXPECT_FALSE(resolved_modes(in, tensor_only).shard_optimizer);
  EXPECT_EQ(shard_reason(in, tensor_only), "training.shard_optimizer = true, but G_data = 1: nothing to shard");
  in.shard_optimizer.reset();
  EXPECT_EQ(shard_reason(in, tensor_only), "G_data = 1: nothing to shard");

  // The chooser: with memory for 4x1x1x1 only sharded, the layouts it ranks are each at their
  // own modes, the table and --explain say which are sharded, and runner-ups say when they differ.
  in.machine.memory_bytes = need(Recompute::none, false) - 1;
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  bool some_sharded = false, some_whole = false;
  for (const Candidate& c : r.ranked) {
    const MemoryModes modes = resolved_modes(in, c.layout);
    EXPECT_EQ(c.shard_optimizer, modes.shard_optimizer) << format_layout(c.layout);
    EXPECT_EQ(c.memory.shard_optimizer, c.shard_optimizer);
    if (c.layout.data == 1) {
      EXPECT_FALSE(c.shard_optimizer);
    }
    (c.shard_optimizer ? some_sharded : some_whole) = true;
    if (c.shard_optimizer != r.best().shard_optimizer) {
      EXPECT_NE(c.why_lost.find("; optimizer "), std::string::npos) << c.why_lost;
    }
  }
  EXPECT_TRUE(some_sharded);
  EXPECT_TRUE(some_whole);
  const std::string table = format_ranked_table(r, 100);
  EXPECT_NE(table.find(" sharded "), std::string::npos) << table;
  const std::string explain = format_explain(r, 100);
  EXPECT_NE(explain.find("  optimizer: auto: per layout sharded over data only where"), std::string::npos) << explain;
  EXPECT_NE(explain.find(std::string(", optimizer ") + (r.best().shard_optimizer ? "sharded over " : "unsharded")),
            std::string::npos)
      << explain;
  EXPECT_NE(explain.find("  optimizer state   "), std::string::npos) << explain;
}

TEST(LayoutSearch, RejectsIndivisibleLayoutsNamingDimAndAxis) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 3;
  const ChooserResult r = choose_layout(in);
  bool named = false;
  for (const auto& rej : r.rejected)
    if (rej.reason.find("hidden=8 is not divisible by G_y*G_z=3") != std::string::npos) named = true;
  EXPECT_TRUE(named);
}

// The search does not consider expert parallelism yet: for an MoE model it ranks the same
// layouts as for the dense one, every one with E_p = 1.
// An MoE model's layouts are ranked at every expert parallelism that divides both E and
// G_data (test_layout_moe.cpp has the rest).
TEST(LayoutSearch, RanksExpertParallelLayoutsOfAnMoeModel) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  in.batch.global_batch = 8;
  in.model.experts = 4;
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  bool expert_parallel = false;
  for (const Candidate& c : r.ranked) {
    EXPECT_EQ(in.model.experts % c.layout.experts, 0) << format_layout_with_order(c.layout);
    EXPECT_EQ(c.layout.data % c.layout.experts, 0) << format_layout_with_order(c.layout);
    expert_parallel |= c.layout.experts > 1;
  }
  EXPECT_TRUE(expert_parallel);
}

TEST(LayoutCost, AxisLinkRuleMatchesListingEveryGroup) {
  for (int world : {4, 6, 8, 12, 16, 24, 32, 48}) {
    for (int per_node : {1, 2, 3, 4, 6, 8}) {
      Machine m;
      m.tasks_per_node = per_node;
      m.nodes = (world + per_node - 1) / per_node;
      for (const Layout& l : enumerate_layouts(world)) {
        for (Axis a : kAllAxes) {
          bool crosses = false;
          for (const auto& g : l.groups(a))
            for (int r : g) crosses |= r / per_node != g[0] / per_node;
          const LinkTier tier = axis_link(m, l, comm_axis(a));
          if (l.size(a) == 1)
            EXPECT_EQ(tier, LinkTier::none);
          else
            EXPECT_EQ(tier, crosses ? LinkTier::inter_node : LinkTier::intra_node)
                << format_layout_with_order(l) << " axis " << axis_name(a) << " per node " << per_node;
        }
      }
    }
  }
}

ChooserInput two_nodes_of_four() {
  ChooserInput in;
  in.model = {4, 512, 8, 1024, 128};
  in.batch = {16, 2, ElementType::float32};
  in.machine.nodes = 2;
  in.machine.tasks_per_node = 4;
  in.machine.peak_flops = 1e14;
  in.machine.memory_bytes = 80e9;
  in.machine.intra_node = {1e11, 1e-6};
  in.machine.inter_node = {1e10, 5e-6};  // 10x lower
  return in;
}

TEST(LayoutSearch, TensorGroupsInsideANodeBeatTheSameLayoutSpreadAcrossNodes) {
  const ChooserInput in = two_nodes_of_four();
  const Candidate inside = evaluate_layout(in, parse_layout("2x4x1x1:xyzd"));  // x groups = ranks 0-3, 4-7
  const Candidate spread = evaluate_layout(in, parse_layout("2x4x1x1:dxyz"));  // x groups stride 2: cross nodes
  EXPECT_EQ(inside.cost.link[static_cast<size_t>(CommAxis::x)], LinkTier::intra_node);
  EXPECT_EQ(spread.cost.link[static_cast<size_t>(CommAxis::x)], LinkTier::inter_node);
  EXPECT_LT(inside.cost.step_s(), spread.cost.step_s());
  EXPECT_EQ(inside.volume.bytes(CommAxis::x), spread.volume.bytes(CommAxis::x));  // same bytes, other links
}

TEST(LayoutSearch, PureDataParallelWinsForATinyModel) {
  ChooserInput in = tiny_input();
  in.machine.intra_node = {1e11, 1e-6};
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(format_layout(r.best().layout), "4x1x1x1");
}

TEST(LayoutSearch, IsDeterministicAndRanksByTime) {
  const ChooserInput in = two_nodes_of_four();
  const ChooserResult a = choose_layout(in), b = choose_layout(in);
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    EXPECT_EQ(format_layout_with_order(a.ranked[i].layout), format_layout_with_order(b.ranked[i].layout));
    if (i) {
      EXPECT_LE(a.ranked[i - 1].cost.step_s(), a.ranked[i].cost.step_s());
      EXPECT_FALSE(a.ranked[i].why_lost.empty());
    }
  }
  EXPECT_EQ(format_ranked_table(a, 5), format_ranked_table(b, 5));
  EXPECT_NE(format_explain(a, 5).find("runner-ups:"), std::string::npos);
}

// --explain says what the counts are of: a Llama-form model's architecture, and nothing more
// for GPT-2's.
TEST(LayoutSearch, ExplainNamesALlamaFormArchitecture) {
  ChooserInput in = two_nodes_of_four();
  EXPECT_EQ(format_explain(choose_layout(in), 5).find("architecture:"), std::string::npos);
  in.model.norm = Norm::rmsnorm;
  in.model.mlp = Mlp::swiglu;
  in.model.mlp_hidden = 3 * in.model.hidden;
  in.model.positions = Positions::rope;
  in.model.rope_scaling = RopeScaling{};
  in.model.kv_heads = in.model.heads / 2;
  in.model.bias = false;
  in.model.tie_embeddings = false;
  const std::string explain = format_explain(choose_layout(in), 5);
  const std::string want = "architecture: rmsnorm (eps 1e-05), swiglu MLP of " + std::to_string(3 * in.model.hidden) +
                           ", rope (theta 10000, llama3 scaling x8), " + std::to_string(in.model.heads / 2) +
                           " key/value heads for " + std::to_string(in.model.heads) +
                           " query heads, no biases, untied embeddings\n";
  EXPECT_NE(explain.find(want), std::string::npos) << explain;
}

TEST(LayoutSearch, ResultDoesNotDependOnEnumerationOrder) {
  ChooserInput in = two_nodes_of_four();
  in.policy.max_tensor_parallel = 4;  // rejects the 8-way tensor-parallel tuples, so the rejected list is not empty
  const ChooserResult forward = choose_layout(in);
  ASSERT_FALSE(forward.rejected.empty());
  std::vector<Layout> reversed = enumerate_layouts(in.world());
  std::reverse(reversed.begin(), reversed.end());
  std::vector<Layout> shuffled = enumerate_layouts(in.world());
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(20261122));
  shuffled.push_back(shuffled.front());  // a repeat changes nothing either
  for (const auto& candidates : {reversed, shuffled}) {
    const ChooserResult other = choose_among(in, candidates);
    ASSERT_EQ(other.ranked.size(), forward.ranked.size());
    for (size_t i = 0; i < forward.ranked.size(); ++i) {
      EXPECT_EQ(other.ranked[i].layout, forward.ranked[i].layout) << "rank " << i;
      EXPECT_EQ(other.ranked[i].why_lost, forward.ranked[i].why_lost) << "rank " << i;
    }
    ASSERT_EQ(other.rejected.size(), forward.rejected.size());
    for (size_t i = 0; i < forward.rejected.size(); ++i) {
      EXPECT_EQ(other.rejected[i].layout, forward.rejected[i].layout) << "rejection " << i;
      EXPECT_EQ(other.rejected[i].reason, forward.rejected[i].reason) << "rejection " << i;
    }
    EXPECT_EQ(format_explain(other, 100), format_explain(forward, 100));
  }
}

TEST(LayoutSearch, NoFitSuggestionMakesALayoutFit) {
  ChooserInput in = two_nodes_of_four();
  in.model = {24, 2048, 16, 50304, 1024};
  in.batch = {64, 8, ElementType::float32};
  in.recompute = Recompute::none;
  in.machine.nodes = 1;
  in.machine.memory_bytes = 16e9;
  ASSERT_FALSE(choose_layout(in).fits());
  const std::string change = smallest_fitting_change(in);
  ASSERT_NE(change.find("needs >= "), std::string::npos) << change;
  const int gpus = std::stoi(change.substr(change.find(">= ") + 3));
  ChooserInput bigger = in;
  bigger.machine.nodes = gpus / in.machine.tasks_per_node;
  EXPECT_TRUE(choose_layout(bigger).fits()) << change;
  bigger.machine.nodes -= 1;
  EXPECT_FALSE(choose_layout(bigger).fits()) << "the suggestion is not the smallest: " << change;
  // The job names recompute none: the hint offers the least recomputation that fits, which does.
  ASSERT_NE(change.find(" or training.recompute = \""), std::string::npos) << change;
  const std::string mode = change.substr(change.find("recompute = \"") + 13);
  ChooserInput recomputing = in;
  recomputing.recompute = mode.starts_with("attention") ? Recompute::attention : Recompute::block;
  EXPECT_TRUE(choose_layout(recomputing).fits()) << change;
  if (*recomputing.recompute == Recompute::block) {
    recomputing.recompute = Recompute::attention;
    EXPECT_FALSE(choose_layout(recomputing).fits()) << "the suggestion is not the least recomputation: " << change;
  }
}

// One node of 5 ranks (`srun -n 5`, `axonn run -n 5`): a single-node step changes its task
// count, so the hint names the nearest rank counts there, not whole nodes of 5 (none of which
// runs a job of hidden 8 and global batch 4) nor GPUs.
TEST(LayoutSearch, OnOneNodeTheHintNamesTheNearestRankCountsThatRun) {
  ChooserInput in = tiny_input();  // C = 8, H = 2, V = 16, B = 4
  in.machine.nodes = 1;
  in.machine.tasks_per_node = 5;
  EXPECT_EQ(smallest_fitting_change(in),
            "no data x X x Y x Z split of 5 ranks divides the job (e.g. 5x1x1x1: global_batch=4 is not divisible by "
            "G_data*G_z=5); the nearest rank counts on one node on which a layout runs: 4 and 8");
}

// The chooser takes its sizes from the count's divisors and checks a size tuple before pricing
// its orders; the no-fit hint builds its candidates from the job's dimensions. So counts of a
// million GPUs answer at once (ctest's TIMEOUT is the hang guard): a prime, the two counts
// below 10^6 with the most factorizations, 10^6 and 2^20.
TEST(LayoutSearch, ChooserAndHintAnswerForMillionsOfGpus) {
  ChooserInput in = tiny_input();  // C = 8, H = 2, V = 16, B = 4: at most 8 * 2 * 4 = 64 ranks divide it
  in.machine.tasks_per_node = 1;
  for (int world : {999983, 720720, 997920, 1000000, 1 << 20}) {
    in.machine.nodes = world;
    const ChooserResult r = choose_layout(in);
    EXPECT_FALSE(r.fits()) << world;
    EXPECT_EQ(static_cast<int64_t>(r.rejected.size()), ordered_factorizations(world)) << world;
    const std::string w = std::to_string(world);
    EXPECT_EQ(smallest_fitting_change(in),
              "no data x X x Y x Z split of " + w + " ranks divides the job (e.g. " + w +
                  "x1x1x1: global_batch=4 is not divisible by G_data*G_z=" + w +
                  "); the nearest GPU count on which a layout runs: 64 GPUs (64 nodes of 1), none above " + w);
  }
  // A global batch of 720720 sequences divides 720720 data-parallel ranks: that count is ranked.
  in.batch.global_batch = 720720;
  in.machine.nodes = 720720;
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  EXPECT_TRUE(std::any_of(r.ranked.begin(), r.ranked.end(),
                          [](const Candidate& c) { return format_layout(c.layout) == "720720x1x1x1"; }));
  EXPECT_EQ(smallest_fitting_change(in), "");
}

// GPT-2 small on 125 DGX-like nodes of 8 (8000 = 2^6 * 5^3 GPUs): no split divides its
// dimensions (no factor 5 in any), whatever the memory.
ChooserInput gpt_small_on(int nodes) {
  ChooserInput in;
  in.model = {12, 768, 12, 50304, 1024};
  in.batch = {512, 16, ElementType::bfloat16};
  in.machine.nodes = nodes;
  in.machine.tasks_per_node = 8;
  in.machine.peak_flops = 989e12;
  in.machine.memory_bytes = 80.0 * (1 << 30);
  in.machine.intra_node = {450e9, 2e-6};
  in.machine.inter_node = {50e9, 5e-6};
  return in;
}

TEST(LayoutSearch, NoSplitDividesBlamesDivisibilityAndNamesTheNearestCountsThatRun) {
  const ChooserInput in = gpt_small_on(1000);
  ASSERT_FALSE(choose_layout(in).fits());
  const std::string change = smallest_fitting_change(in);
  EXPECT_EQ(change.find("no data x X x Y x Z split of 8000 ranks divides the job (e.g. 8000x1x1x1: "
                        "global_batch=512 is not divisible by G_data*G_z=8000); the nearest GPU counts on which a "
                        "layout runs: "),
            0u)
      << change;
  EXPECT_EQ(change.find("memory"), std::string::npos) << change;
  // "...: B GPUs (B/8 nodes of 8) and A GPUs (A/8 nodes of 8)": both run, no count of whole
  // nodes between them does.
  std::smatch counts;
  ASSERT_TRUE(std::regex_search(change, counts, std::regex("([0-9]+) GPUs \\([0-9]+ nodes of 8\\) and ([0-9]+) GPUs")))
      << change;
  const int below = std::stoi(counts[1]), above = std::stoi(counts[2]);
  ASSERT_GT(below, 0) << change;
  ASSERT_GT(above, 8000) << change;
  ASSERT_LT(below, 8000) << change;
  EXPECT_TRUE(choose_layout(gpt_small_on(below / 8)).fits()) << change;
  EXPECT_TRUE(choose_layout(gpt_small_on(above / 8)).fits()) << change;
  for (int nodes = below / 8 + 1; nodes < above / 8; ++nodes)
    EXPECT_FALSE(choose_layout(gpt_small_on(nodes)).fits()) << nodes << " nodes run it, nearer than " << change;
}

// Reasons in the order of the checks, each check's by its number (G_data*G_z=8 before =16 and
// =128), each reason's layouts by their sizes.
TEST(LayoutReport, RejectedLayoutsSortByReasonThenNumerically) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 128;
  const std::string explain = format_explain(choose_layout(in), 10);
  size_t last = 0;
  for (const char* reason :
       {"hidden=8 is not divisible by G_x*G_z=16: ", "hidden=8 is not divisible by G_x*G_z=128: ",
        "heads=2 is not divisible by G_y=4: ", "heads=2 is not divisible by G_y=8: ",
        "global_batch=4 is not divisible by G_data*G_z=8: ", "global_batch=4 is not divisible by G_data*G_z=16: ",
        "global_batch=4 is not divisible by G_data*G_z=128: "}) {
    const size_t at = explain.find(reason);
    ASSERT_NE(at, std::string::npos) << reason << "\n" << explain;
    EXPECT_GT(at, last) << reason << " is out of order:\n" << explain;
    last = at;
  }
  EXPECT_NE(explain.find("global_batch=4 is not divisible by G_data*G_z=32: 8x2x2x4, 16x2x2x2, 16x4x1x2, "
                         "32x2x2x1, 32x4x1x1\n"),
            std::string::npos)
      << explain;
}

// Right-aligned columns end where their header does on every row, one space at least
// between cells, however wide the values (720720x1x1x1 is as wide as the layout column was).
TEST(LayoutReport, TableColumnsStayAlignedAtLargeCounts) {
  ChooserInput in = tiny_input();
  in.batch.global_batch = 720720;
  in.machine.tasks_per_node = 8;
  in.machine.nodes = 90090;
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  std::istringstream table(format_ranked_table(r, static_cast<int>(r.ranked.size())));
  std::string header;
  std::getline(table, header);
  std::vector<size_t> ends;
  size_t from = 0;
  for (const char* name : {"#", "layout", "order", "step ms", "compute", "x ms/MiB", "y ms/MiB", "z ms/MiB",
                           "data ms/MiB", "world ms/MiB", "recompute", "optimizer", "memory", "free"}) {
    const size_t at = header.find(name, from);
    ASSERT_NE(at, std::string::npos) << name << " in " << header;
    from = at + std::string(name).size();
    ends.push_back(from);
  }
  ASSERT_EQ(ends.back(), header.size());
  int rows = 0;
  for (std::string line; std::getline(table, line); ++rows) {
    ASSERT_EQ(line.size(), header.size()) << line << "\n" << header;
    for (size_t e : ends) {
      EXPECT_NE(line[e - 1], ' ') << "a cell does not end at column " << e << ":\n" << header << "\n" << line;
      if (e < line.size()) {
        EXPECT_EQ(line[e], ' ') << "cells run together at column " << e << ":\n" << line;
      }
    }
  }
  EXPECT_EQ(rows, static_cast<int>(r.ranked.size()));
}

// docs/parallel-plan.md's "Bytes per element" table: data -> (float32 job, bfloat16 job).
std::map<std::string, std::pair<int64_t, int64_t>> documented_element_bytes() {
  std::ifstream in(std::string(AXONN_SOURCE_DIR) + "/docs/parallel-plan.md");
  std::map<std::string, std::pair<int64_t, int64_t>> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Bytes per element";
    if (!inside || line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream split(line.substr(1));
    for (std::string cell; std::getline(split, cell, '|');) cells.push_back(cell.substr(1, cell.size() - 2));
    if (cells.size() == 4 && std::isdigit(static_cast<unsigned char>(cells[2][0])))
      rows[cells[0]] = {std::stoll(cells[2]), std::stoll(cells[3])};
  }
  return rows;
}

// The model moves each kind of data in the type the docs give per dtype, and the predicted
// bytes of a bfloat16 job differ from a float32 job's exactly by that, axis by axis (the
// trainer's counters equal the model's: model_step.cpp checks them in both types).
TEST(LayoutVolume, Bfloat16AndFloat32BytesDifferAsTheDocsSay) {
  const auto docs = documented_element_bytes();
  ASSERT_EQ(docs.size(), 6u) << "docs/parallel-plan.md, ## Bytes per element";
  const CollectiveTypes f32 = collective_types(ElementType::float32);
  const CollectiveTypes bf16 = collective_types(ElementType::bfloat16);
  const auto sizes = [](ElementType a, ElementType b) {
    return std::pair<int64_t, int64_t>(static_cast<int64_t>(element_size(a)), static_cast<int64_t>(element_size(b)));
  };
  EXPECT_EQ(docs.at("weights"), sizes(f32.weights, bf16.weights));
  EXPECT_EQ(docs.at("activations"), sizes(f32.activations, bf16.activations));
  EXPECT_EQ(docs.at("gradients"), sizes(f32.gradients, bf16.gradients));
  EXPECT_EQ(docs.at("statistics"), sizes(f32.statistics, bf16.statistics));
  EXPECT_EQ(docs.at("updated weights"), sizes(f32.updated_weights, bf16.updated_weights));
  EXPECT_EQ(docs.at("updated small tensors"), sizes(f32.updated_small, bf16.updated_small));

  ChooserInput in = tiny_input();  // L = 1, T = 4
  in.machine.tasks_per_node = 16;
  const Layout l = parse_layout("2x2x2x2");  // b = 4/(2*2) = 1 sequence, A = 1, m = 4 tokens
  const StepVolume a = predict_step_volume(in, l);
  in.batch.dtype = ElementType::bfloat16;
  const StepVolume b = predict_step_volume(in, l);
  // Statistics elements per cell (docs): 2L+1 = 3 LayerNorms of 2m forward and 2m backward over
  // x; the loss's m*2 over y and its gathered row maxima m*G_y; the world's 4.
  struct Cell {
    CommAxis axis;
    CollectiveKind kind;
    const char* data;    // the documented row the cell's other bytes move as
    int64_t statistics;  // elements
  };
  using K = CollectiveKind;
  const Cell cells[] = {
      {CommAxis::z, K::all_gather, "weights", 0},          {CommAxis::z, K::reduce_scatter, "gradients", 0},
      {CommAxis::z, K::all_reduce, "gradients", 0},        {CommAxis::data, K::all_reduce, "gradients", 0},
      {CommAxis::x, K::all_reduce, "activations", 3 * 16}, {CommAxis::y, K::all_reduce, "activations", 8},
      {CommAxis::y, K::all_gather, "statistics", 8},       {CommAxis::world, K::all_reduce, "statistics", 4},
  };
  const auto [stat32, stat16] = docs.at("statistics");
  for (const Cell& c : cells) {
    const auto [per32, per16] = docs.at(c.data);
    const int64_t other32 = a.at(c.axis, c.kind).bytes - c.statistics * stat32;
    ASSERT_GT(a.at(c.axis, c.kind).bytes, 0) << comm_axis_name(c.axis) << " " << collective_name(c.kind);
    ASSERT_EQ(other32 % per32, 0) << comm_axis_name(c.axis) << " " << collective_name(c.kind);
    EXPECT_EQ(b.at(c.axis, c.kind).bytes, other32 / per32 * per16 + c.statistics * stat16)
        << comm_axis_name(c.axis) << " " << collective_name(c.kind);
    EXPECT_EQ(b.at(c.axis, c.kind).calls, a.at(c.axis, c.kind).calls);
  }
}

// ---- a calibrated machine (axonn calibrate): measured GEMM rates and fitted collectives.

// Every collective of the step on a calibrated tier is priced by its kind's fit: calls *
// ring_steps * alpha + bus_factor * bytes / beta, alpha and beta as fitted, per kind.
TEST(LayoutCalibrated, PricesEachCollectiveKindByItsFit) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("2x2x1x2");  // every axis inside the node of 8
  KindLinks fits;
  fits[static_cast<size_t>(CollectiveKind::all_reduce)] = Link{3e8, 70e-6};
  fits[static_cast<size_t>(CollectiveKind::all_gather)] = Link{5e8, 40e-6};
  fits[static_cast<size_t>(CollectiveKind::reduce_scatter)] = Link{4e8, 55e-6};
  in.machine.intra_node_measured.kinds = fits;
  const StepVolume v = predict_step_volume(in, l);
  const CostEstimate c = estimate_cost(in, l, v);
  for (int a = 0; a < kCommAxisCount; ++a) {
    const auto axis = static_cast<CommAxis>(a);
    const int n = v.group_size[static_cast<size_t>(a)];
    double want = 0;
    for (const CollectiveKind kind : kCalibratedKindsForTest) {
      const CollectiveVolume& cv = v.at(axis, kind);
      const Link& fit = *fits[static_cast<size_t>(kind)];
      if (n > 1 && cv.calls > 0)
        want += static_cast<double>(cv.calls) * ring_steps(kind, n) * fit.latency_s +
                bus_factor(kind, n) * static_cast<double>(cv.bytes) / fit.bandwidth_bytes_per_s;
    }
    EXPECT_DOUBLE_EQ(c.comm_s[static_cast<size_t>(a)], want) << comm_axis_name(axis);
  }
  EXPECT_GT(c.comm_s[static_cast<size_t>(CommAxis::z)], 0);
  // Every kind of the step is fitted, so the intra-node tier's own Link prices nothing.
  ChooserInput other = in;
  other.machine.intra_node = {1.0, 1.0};
  EXPECT_EQ(estimate_cost(other, l, v).comm_s, c.comm_s);
}

// A kind the calibration did not fit, and every tier without fits, keep the tier's Link.
TEST(LayoutCalibrated, UnfittedKindsAndTiersKeepTheirLink) {
  Machine m;
  m.intra_node = {1e10, 1e-6};
  m.inter_node = {1e9, 1e-5};
  m.inter_node_measured.kinds[static_cast<size_t>(CollectiveKind::all_gather)] = Link{2e9, 3e-5};
  EXPECT_EQ(&collective_link(m, LinkTier::inter_node, CollectiveKind::all_reduce), &m.inter_node);
  EXPECT_EQ(collective_link(m, LinkTier::inter_node, CollectiveKind::all_gather).latency_s, 3e-5);
  EXPECT_EQ(&collective_link(m, LinkTier::intra_node, CollectiveKind::all_gather), &m.intra_node);
}

// Groups of a size calibrate measured on their own are priced by that size's fits (its small
// line included), every other size by the tier's, as is a kind the size's entry lacks; and
// estimate_cost prices each axis by its group size.
TEST(LayoutCalibrated, GroupsOfAMeasuredSizeTakeThatSizesFit) {
  Machine m;
  m.intra_node = {1e10, 1e-6};
  const auto ar = static_cast<size_t>(CollectiveKind::all_reduce);
  m.intra_node_measured.kinds[ar] = Link{2e9, 100e-6};
  MeasuredGroup pairs;
  pairs.ranks = 2;
  pairs.kinds[ar] = Link{1e9, 300e-6};
  pairs.small[ar] = SmallMessageLink{4096, Link{1e9, 40e-6}};
  m.intra_node_measured.groups.push_back(pairs);
  EXPECT_EQ(collective_link(m, LinkTier::intra_node, CollectiveKind::all_reduce, 1 << 20, 2).latency_s, 300e-6);
  EXPECT_EQ(collective_link(m, LinkTier::intra_node, CollectiveKind::all_reduce, 4096, 2).latency_s, 40e-6);
  EXPECT_EQ(collective_link(m, LinkTier::intra_node, CollectiveKind::all_reduce, 1 << 20, 4).latency_s, 100e-6);
  EXPECT_EQ(collective_link(m, LinkTier::intra_node, CollectiveKind::all_reduce, 1 << 20).latency_s, 100e-6);
  EXPECT_EQ(&collective_link(m, LinkTier::intra_node, CollectiveKind::all_gather, 1 << 20, 2), &m.intra_node);

  // 4 ranks on a node, 2x2x1x1: the x all-reduces run in groups of 2, priced by the pairs' fit.
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 4;
  in.machine.intra_node_measured = m.intra_node_measured;
  const Layout l{2, 2, 1, 1};
  const StepVolume v = predict_step_volume(in, l);
  const double with_pairs = estimate_cost(in, l, v).comm_s[static_cast<size_t>(CommAxis::x)];
  in.machine.intra_node_measured.groups.clear();
  const double without = estimate_cost(in, l, v).comm_s[static_cast<size_t>(CommAxis::x)];
  double expected = 0, expected_without = 0;
  for (const CollectiveCalls& c : v.calls) {
    if (c.axis != CommAxis::x) continue;
    const Link& pair = c.bytes <= 4096 ? pairs.small[ar]->link : *pairs.kinds[ar];
    const Link& tier = *m.intra_node_measured.kinds[ar];
    expected += static_cast<double>(c.calls) * (2 * pair.latency_s + static_cast<double>(c.bytes) / pair.bandwidth_bytes_per_s);
    expected_without +=
        static_cast<double>(c.calls) * (2 * tier.latency_s + static_cast<double>(c.bytes) / tier.bandwidth_bytes_per_s);
  }
  EXPECT_GT(expected, 0);
  EXPECT_NEAR(with_pairs, expected, 1e-12 + 1e-9 * expected);
  EXPECT_NEAR(without, expected_without, 1e-12 + 1e-9 * expected_without);
}

// A small-message line prices the calls up to its max_bytes, and the kind's line the larger
// ones, call by call: the step's x all-reduces of LayerNorm statistics (a few KiB) and of
// activations (larger) on the two lines.
TEST(LayoutCalibrated, SmallMessageLinePricesTheCallsUpToItsSize) {
  Machine m;
  m.intra_node = {1e10, 1e-6};
  m.intra_node_measured.kinds[static_cast<size_t>(CollectiveKind::all_reduce)] = Link{2e9, 500e-6};
  m.intra_node_measured.small[static_cast<size_t>(CollectiveKind::all_reduce)] = SmallMessageLink{65536, Link{1e9, 20e-6}};
  EXPECT_EQ(collective_link(m, LinkTier::intra_node, CollectiveKind::all_reduce, 65536).latency_s, 20e-6);
  EXPECT_EQ(collective_link(m, LinkTier::intra_node, CollectiveKind::all_reduce, 65537).latency_s, 500e-6);
  EXPECT_EQ(&collective_link(m, LinkTier::intra_node, CollectiveKind::all_gather, 10), &m.intra_node);
  EXPECT_EQ(small_message_link(m, LinkTier::inter_node, CollectiveKind::all_reduce), nullptr);

  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 4;
  in.machine.intra_node_measured = m.intra_node_measured;
  const Layout l = parse_layout("1x4x1x1");
  const StepVolume v = predict_step_volume(in, l);
  double want = 0;
  int small_calls = 0, large_calls = 0;
  for (const CollectiveCalls& calls : v.calls) {
    if (calls.axis != CommAxis::x) continue;
    ASSERT_EQ(calls.kind, CollectiveKind::all_reduce);
    const bool small = calls.bytes <= 65536;
    (small ? small_calls : large_calls) += static_cast<int>(calls.calls);
    const Link link = small ? Link{1e9, 20e-6} : Link{2e9, 500e-6};
    want += static_cast<double>(calls.calls) *
            (ring_steps(calls.kind, 4) * link.latency_s +
             bus_factor(calls.kind, 4) * static_cast<double>(calls.bytes) / link.bandwidth_bytes_per_s);
  }
  EXPECT_GT(small_calls, 0);
  EXPECT_DOUBLE_EQ(estimate_cost(in, l, v).comm_s[static_cast<size_t>(CommAxis::x)], want);
}

// A sweep prices its own group size's calls within its sizes, interpolated as a power law
// between the two measured sizes around a call (a step between 64 and 128 KiB stays a step),
// and leaves another group size, a kind without a sweep and a size outside it to the lines.
TEST(LayoutCalibrated, AMeasuredSweepPricesItsGroupSizesCallsWithinItsSizes) {
  const MeasuredSweep sweep{2, {{4096, 50e-6}, {65536, 66e-6}, {131072, 421e-6}}};
  EXPECT_EQ(sweep.seconds_at(65536, 2), 66e-6);
  EXPECT_EQ(sweep.seconds_at(4096, 2), 50e-6);
  EXPECT_EQ(sweep.seconds_at(131072, 2), 421e-6);
  EXPECT_NEAR(*sweep.seconds_at(98304, 2), 66e-6 * std::pow(421.0 / 66.0, std::log2(1.5)), 1e-15);
  EXPECT_FALSE(sweep.seconds_at(2048, 2));
  EXPECT_FALSE(sweep.seconds_at(262144, 2));
  EXPECT_FALSE(sweep.seconds_at(65536, 4));

  Machine m;
  m.intra_node = {1e10, 1e-6};
  const auto ar = static_cast<size_t>(CollectiveKind::all_reduce);
  m.intra_node_measured.kinds[ar] = Link{1e9, 20e-6};
  MeasuredGroup pairs;
  pairs.ranks = 2;
  pairs.kinds[ar] = Link{1e9, 20e-6};
  pairs.sweeps[ar] = sweep;
  m.intra_node_measured.groups.push_back(pairs);
  const CollectiveCalls calls{CommAxis::x, CollectiveKind::all_reduce, 3, 131072, false};
  EXPECT_DOUBLE_EQ(collective_calls_seconds(m, LinkTier::intra_node, calls, 2), 3 * 421e-6);
  const double line4 = 3 * (ring_steps(CollectiveKind::all_reduce, 4) * 20e-6 +
                            bus_factor(CollectiveKind::all_reduce, 4) * 131072 / 1e9);
  EXPECT_DOUBLE_EQ(collective_calls_seconds(m, LinkTier::intra_node, calls, 4), line4);
  const CollectiveCalls large{CommAxis::x, CollectiveKind::all_reduce, 1, 1 << 20, false};
  EXPECT_DOUBLE_EQ(collective_calls_seconds(m, LinkTier::intra_node, large, 2),
                   ring_steps(CollectiveKind::all_reduce, 2) * 20e-6 + (1 << 20) / 1e9);
  // The tier's own sweep, where its probe ran on groups of the call's size.
  m.intra_node_measured.groups.clear();
  m.intra_node_measured.sweeps[ar] = MeasuredSweep{4, sweep.points};
  EXPECT_DOUBLE_EQ(collective_calls_seconds(m, LinkTier::intra_node, calls, 4), 3 * 421e-6);
  EXPECT_DOUBLE_EQ(collective_calls_seconds(m, LinkTier::intra_node, calls, 2),
                   3 * (ring_steps(CollectiveKind::all_reduce, 2) * 20e-6 + 131072 / 1e9));
}

// The calls of the step, by size, add up to the table the trainer's counters are checked
// against, and the overlapped ones are the z gathers and reduce-scatters, the x all-reduces of
// dX (attn.proj's and mlp.proj's, each beside its dW GEMM) and the data buckets of blocks
// L-1..1, only with training.overlap_comm.
TEST(LayoutVolume, CallsBySizeAddUpToTheTableAndMarkTheOverlappedOnes) {
  for (const bool shard : {false, true}) {
    ChooserInput in = tiny_input();
    in.machine.tasks_per_node = 8;
    const Layout l = parse_layout("2x2x1x2");
    const StepVolume v = predict_step_volume(in, l, MemoryModes(Recompute::none, shard));
    const BatchSplit split = batch_split(in.model, in.batch, l);
    std::array<std::array<CollectiveVolume, kCollectiveKindCount>, kCommAxisCount> sums{};
    int64_t data_overlapped = 0, data_calls = 0, x_overlapped = 0;
    for (const CollectiveCalls& c : v.calls) {
      auto& s = sums[static_cast<size_t>(c.axis)][static_cast<size_t>(c.kind)];
      s.calls += c.calls;
      s.bytes += c.calls * c.bytes;
      const bool z_moved = c.axis == CommAxis::z && c.kind != CollectiveKind::all_reduce;
      if (c.axis == CommAxis::data) (c.overlapped ? data_overlapped : data_calls) += c.calls;
      if (c.axis == CommAxis::x && c.overlapped) {
        x_overlapped += c.calls;
        // beside the dW GEMM of attn.proj or mlp.proj: m rows, k = C/G_y or 4C/G_y, n = C/G_x
        EXPECT_EQ(c.beside.m, split.tokens);
        EXPECT_EQ(c.beside.n, in.model.hidden / l.x);
        EXPECT_EQ(c.bytes, c.beside.m * c.beside.k * 4);  // dX [m, k/G_a] in float32
      }
      if (c.axis != CommAxis::data && c.axis != CommAxis::x) {
        EXPECT_EQ(c.overlapped, z_moved) << comm_axis_name(c.axis);
      }
    }
    EXPECT_EQ(x_overlapped, split.accumulation * 2 * in.model.layers);
    for (int a = 0; a < kCommAxisCount; ++a)
      for (int k = 0; k < kCollectiveKindCount; ++k) {
        EXPECT_EQ(sums[a][k].calls, v.table[a][k].calls) << a << " " << k;
        EXPECT_EQ(sums[a][k].bytes, v.table[a][k].bytes) << a << " " << k;
      }
    const int64_t kinds = shard ? 2 : 1;  // reduce-scatter and all-gather, or all-reduce
    EXPECT_EQ(data_overlapped, kinds * (in.model.layers - 1)) << shard;
    EXPECT_EQ(data_calls, kinds * 3) << shard;  // block 0's, the wte's, the small tensors'
    in.overlap_comm = false;
    for (const CollectiveCalls& c : predict_step_volume(in, l, MemoryModes(Recompute::none, shard)).calls)
      EXPECT_FALSE(c.overlapped);
  }
}

// The overlapped collectives' time, at the tier's overlap fraction, comes off the step, at
// most the compute beside it; without a fraction (or with overlap off) nothing does.
TEST(LayoutCost, OverlapHidesTheMeasuredFractionOfTheOverlappedCollectives) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("2x1x1x2");
  const StepVolume v = predict_step_volume(in, l);
  const CostEstimate none = estimate_cost(in, l, v);
  EXPECT_EQ(none.hidden_s, 0);
  EXPECT_GT(none.overlapped_s, 0);
  EXPECT_LT(none.overlapped_s, none.comm_total_s());
  EXPECT_DOUBLE_EQ(none.step_s(), none.compute_s + none.comm_total_s());
  in.machine.intra_node_measured.overlap = OverlapCurve::flat(0.5);
  const CostEstimate half = estimate_cost(in, l, v);
  EXPECT_EQ(half.comm_s, none.comm_s);
  EXPECT_EQ(half.overlapped_s, none.overlapped_s);
  // The data buckets are capped by one micro-batch's compute, the z ones by the step's.
  double data = 0, other = 0;
  for (const CollectiveCalls& c : v.calls) {
    if (!c.overlapped) continue;
    const Link& link = collective_link(in.machine, LinkTier::intra_node, c.kind, c.bytes);
    const int n = v.group_size[static_cast<size_t>(c.axis)];
    const double t = static_cast<double>(c.calls) * (ring_steps(c.kind, n) * link.latency_s +
                                                     bus_factor(c.kind, n) * static_cast<double>(c.bytes) /
                                                         link.bandwidth_bytes_per_s);
    (c.axis == CommAxis::data ? data : other) += 0.5 * t;
  }
  const double micro_batches = static_cast<double>(batch_split(in.model, in.batch, l).accumulation);
  const double want = std::min(half.compute_s, std::min(data, half.compute_s / micro_batches) + other);
  EXPECT_GT(want, 0);
  EXPECT_DOUBLE_EQ(half.hidden_s, want);
  EXPECT_DOUBLE_EQ(half.step_s(), half.compute_s + half.comm_total_s() - want);
  // All of it hidden, at most the compute: the step is never shorter than its compute.
  in.machine.intra_node_measured.overlap = OverlapCurve::flat(1);
  in.machine.intra_node = {1e3, 1e-3};  // slow: the overlapped collectives outlast the compute
  const CostEstimate slow = estimate_cost(in, l, predict_step_volume(in, l));
  EXPECT_DOUBLE_EQ(slow.hidden_s, slow.compute_s);
  EXPECT_GE(slow.step_s(), slow.comm_total_s());
  in.overlap_comm = false;
  EXPECT_EQ(estimate_cost(in, l, predict_step_volume(in, l)).hidden_s, 0);
}

// The backward's all-reduces of dX (OAR) hide behind their layers' dW GEMMs: each call at its
// tier's overlap fraction, at most its dW GEMM's time (2·m·k·n at the shape's rate); the
// forward's all-reduces of Y hide nothing. The axes' shares add up to the step's hidden time.
TEST(LayoutCost, AnAllReduceOfDxHidesAtMostItsWeightGradientGemm) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  in.overlap_comm = true;
  const Layout l = parse_layout("1x2x1x1");
  for (const double fraction : {0.4, 1.0}) {
    in.machine.intra_node_measured.overlap = OverlapCurve::flat(fraction);
    const StepVolume v = predict_step_volume(in, l);
    const CostEstimate c = estimate_cost(in, l, v);
    double overlapped = 0, want_hidden = 0;
    int capped = 0;
    for (const CollectiveCalls& calls : v.calls) {
      if (calls.axis != CommAxis::x || !calls.overlapped) continue;
      ASSERT_GT(calls.beside.m, 0);
      const double t = collective_calls_seconds(in.machine, LinkTier::intra_node, calls, 2);
      const double gemm = static_cast<double>(calls.calls) * 2.0 * static_cast<double>(calls.beside.m) *
                          static_cast<double>(calls.beside.k) * static_cast<double>(calls.beside.n) /
                          gemm_rate(in.machine, calls.beside);
      overlapped += t;
      want_hidden += std::min(t * fraction, gemm);
      capped += t * fraction > gemm ? 1 : 0;
    }
    ASSERT_GT(overlapped, 0);
    EXPECT_DOUBLE_EQ(c.overlapped_axis_s[static_cast<size_t>(CommAxis::x)], overlapped);
    EXPECT_DOUBLE_EQ(c.overlapped_s, overlapped);  // nothing else overlaps at 1x2x1x1
    EXPECT_NEAR(c.hidden_axis_s[static_cast<size_t>(CommAxis::x)], want_hidden, 1e-12 * want_hidden);
    EXPECT_NEAR(c.hidden_s, want_hidden, 1e-12 * want_hidden);
    EXPECT_LT(c.hidden_s, fraction * c.comm_s[static_cast<size_t>(CommAxis::x)]);  // the forward's hide nothing
    if (fraction == 1.0) {
      EXPECT_GT(capped, 0) << "the tiny model's dW GEMMs are shorter than their all-reduces";
    }
  }
  in.overlap_comm = false;
  const CostEstimate off = estimate_cost(in, l, predict_step_volume(in, l));
  EXPECT_EQ(off.hidden_s, 0);
  EXPECT_EQ(off.hidden_axis_s[static_cast<size_t>(CommAxis::x)], 0);
}

// training.tp_chunks = c makes each linear layer's x and y all-reduce c calls of a c-th of the
// bytes: the bytes per step stay, the calls grow by (c - 1) per layer call; with overlap all
// but the forward's last chunk run beside a GEMM (a chunk's, or the dW GEMM for the backward's
// last). The other collectives (LayerNorms, embedding, loss) are unchanged.
TEST(LayoutVolume, TpChunksMultiplyTheTensorCallsAndKeepTheBytes) {
  ChooserInput in = tiny_input();  // L = 1, T = 4, micro-batch 1 at 1x2x2x1: m = 4 rows, A = 4
  in.overlap_comm = true;
  const Layout l = parse_layout("1x2x2x1");
  const StepVolume one = predict_step_volume(in, l);
  in.batch.tp_chunks = 4;
  const StepVolume four = predict_step_volume(in, l);
  const int64_t A = batch_split(in.model, in.batch, l).accumulation;
  // Per micro-batch each axis sums 4L + 1 linear outputs or input gradients: x the forward of
  // qkv, fc and the head and the backward of attn.proj and mlp.proj; y the others.
  const int64_t linear_calls = A * (4 * in.model.layers + 1);
  for (const CommAxis axis : {CommAxis::x, CommAxis::y}) {
    const auto& a = one.at(axis, CollectiveKind::all_reduce);
    const auto& b = four.at(axis, CollectiveKind::all_reduce);
    EXPECT_EQ(b.bytes, a.bytes) << comm_axis_name(axis);
    EXPECT_EQ(b.calls - a.calls, 3 * linear_calls) << comm_axis_name(axis);
    int64_t blocking_chunks = 0;
    for (const CollectiveCalls& c : four.calls)
      if (c.axis == axis && c.kind == CollectiveKind::all_reduce && c.beside.m > 0) {
        EXPECT_TRUE(c.overlapped);
        EXPECT_TRUE(c.beside.m == 1 || c.beside.m == 4) << c.beside.m;  // a chunk's GEMM, or the dW GEMM
      } else if (c.axis == axis && c.kind == CollectiveKind::all_reduce && c.bytes >= 4 * 4) {
        blocking_chunks += c.calls;  // the forward's last chunks (the LayerNorms' and loss's are smaller)
      }
    EXPECT_GE(blocking_chunks, A * (2 * in.model.layers + (axis == CommAxis::x ? 1 : 0)));
  }
  for (const CommAxis axis : {CommAxis::z, CommAxis::data, CommAxis::world})
    for (int k = 0; k < kCollectiveKindCount; ++k)
      EXPECT_EQ(four.table[static_cast<size_t>(axis)][static_cast<size_t>(k)].calls,
                one.table[static_cast<size_t>(axis)][static_cast<size_t>(k)].calls);
  in.batch.tp_chunks = BatchShape::kAutoTpChunks;
  EXPECT_THROW(predict_step_volume(in, l), LayoutError);  // "auto" undecided
}

// training.tp_chunks = "auto" takes, per layout, the fewest chunks among 1, 2, 4, ... that
// split the rows whose predicted step is the shortest, and says what it compared; a layout
// that sums nothing over x or y takes 1. The chooser ranks each layout at its count.
TEST(LayoutSearch, AutoTpChunksTakesTheShortestPredictedStep) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 4;
  in.overlap_comm = true;
  in.machine.intra_node_measured.overlap = OverlapCurve::flat(0.9);
  in.batch.tp_chunks = BatchShape::kAutoTpChunks;
  const Layout l = parse_layout("1x2x2x1");
  const MemoryModes modes = resolved_modes(in, l);
  double best = 0;
  int want = 0;
  for (const int n : {1, 2, 4}) {  // m = 4 rows
    ChooserInput at = in;
    at.batch.tp_chunks = n;
    const double step = estimate_cost(at, l, predict_step_volume(at, l, modes), modes).step_s();
    if (want == 0 || step < best) best = step, want = n;
  }
  EXPECT_EQ(resolved_tp_chunks(in, l, modes), want);
  const std::string why = tp_chunks_reason(in, l, modes);
  EXPECT_EQ(why.rfind("training.tp_chunks = auto: " + std::to_string(want) + " chunk(s), the shortest predicted "
                      "step (1: ", 0), 0u) << why;
  EXPECT_NE(why.find(", 4: "), std::string::npos) << why;
  EXPECT_EQ(resolved_tp_chunks(in, parse_layout("4x1x1x1"), modes), 1);
  EXPECT_EQ(tp_chunks_reason(in, parse_layout("4x1x1x1"), modes),
            "training.tp_chunks = auto: nothing to split, as no linear layer sums over x or y (G_x = G_y = 1)");
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  for (const Candidate& c : r.ranked) {
    EXPECT_EQ(c.tp_chunks, resolved_tp_chunks(in, c.layout, resolved_modes(in, c.layout))) << format_layout(c.layout);
  }
}

// training.overlap_comm = "auto" overlaps unless calibrate measured, on the tier of an axis
// whose collectives overlap (x, y, z, data), that overlap costs (overlap < 0): then the model prices
// every call blocking and the memory holds one block's gathered weights, as the trainer runs
// it. A job that forces overlap there pays the measured extra time; a layout whose overlapped
// axes cross no such tier, or a site that measured nothing, overlaps.
TEST(LayoutCost, AutoOverlapIsOffWhereCalibrateMeasuredThatItCosts) {
  ChooserInput in = tiny_input();
  in.model.layers = 2;
  in.machine.tasks_per_node = 8;
  in.recompute = Recompute::block;  // with overlap, two blocks' gathered weights at a time
  const Layout z = parse_layout("1x1x1x2"), x = parse_layout("1x2x1x1");
  const auto overlapped_calls = [&](const Layout& l) {
    int64_t n = 0;
    for (const CollectiveCalls& c : predict_step_volume(in, l).calls) n += c.overlapped ? c.calls : 0;
    return n;
  };
  ASSERT_TRUE(overlaps_comm(in, z));  // measured nothing
  EXPECT_EQ(overlap_reason(in, z).rfind("auto: on", 0), 0u) << overlap_reason(in, z);
  const int64_t overlapped = overlapped_calls(z);
  const int64_t two_blocks = estimate_memory(in, z).gathered_weights;
  ASSERT_GT(overlapped, 0);

  in.machine.intra_node_measured.overlap = OverlapCurve::flat(-0.5);
  EXPECT_FALSE(overlaps_comm(in, z));
  const std::string why = overlap_reason(in, z);
  EXPECT_EQ(why.rfind("auto: off: on the z axis's intra-node links, with calls of ", 0), 0u) << why;
  EXPECT_NE(why.find("(network.intra_node.overlap in the site: -0.50); overlapped, this layout's collectives would "
                     "take "),
            std::string::npos)
      << why;
  EXPECT_EQ(overlapped_calls(z), 0);
  EXPECT_LT(estimate_memory(in, z).gathered_weights, two_blocks);
  const CostEstimate blocking = estimate_cost(in, z, predict_step_volume(in, z));
  EXPECT_EQ(blocking.overlapped_s, 0);
  EXPECT_DOUBLE_EQ(blocking.step_s(), blocking.compute_s + blocking.comm_total_s());
  // x's all-reduces of dX overlap too (OAR), on the same links: off there as well.
  EXPECT_FALSE(overlaps_comm(in, x));
  EXPECT_EQ(overlap_reason(in, x).rfind("auto: off: on the x axis's intra-node links", 0), 0u) << overlap_reason(in, x);
  // Across nodes, whose tier calibrate did not measure, overlap stays on.
  ChooserInput across = in;
  across.machine.tasks_per_node = 1;
  across.machine.nodes = 2;
  EXPECT_TRUE(overlaps_comm(across, x)) << overlap_reason(across, x);

  in.overlap_comm = true;
  EXPECT_TRUE(overlaps_comm(in, z));
  EXPECT_EQ(overlap_reason(in, z), "training.overlap_comm = true");
  EXPECT_EQ(overlapped_calls(z), overlapped);
  EXPECT_EQ(estimate_memory(in, z).gathered_weights, two_blocks);
  const CostEstimate forced = estimate_cost(in, z, predict_step_volume(in, z));
  EXPECT_GT(forced.overlapped_s, 0);
  EXPECT_DOUBLE_EQ(forced.hidden_s, -0.5 * forced.overlapped_s);
  EXPECT_DOUBLE_EQ(forced.step_s(), forced.compute_s + forced.comm_total_s() + 0.5 * forced.overlapped_s);
  in.overlap_comm = false;
  EXPECT_EQ(overlap_reason(in, z), "training.overlap_comm = false");
}

// Where calibrate measured a group size's own overlap, collectives on groups of that size are
// decided and priced by it, and every other size by the tier's: on 4 ranks, the z pairs of
// 2x1x1x2 by the pairs' curve, the z groups of 1x1x1x4 by the tier's.
TEST(LayoutCost, AGroupSizesOwnOverlapDecidesAndPricesItsCalls) {
  ChooserInput in = tiny_input();
  in.model.layers = 2;
  in.machine.tasks_per_node = 4;
  const Layout pairs_z = parse_layout("2x1x1x2"), fours_z = parse_layout("1x1x1x4");
  in.machine.intra_node_measured.overlap = OverlapCurve::flat(0.25);
  MeasuredGroup pairs;
  pairs.ranks = 2;
  pairs.overlap = OverlapCurve::flat(-0.5);
  in.machine.intra_node_measured.groups.push_back(pairs);
  EXPECT_DOUBLE_EQ(overlap_efficiency(in.machine, LinkTier::intra_node, 65536, 2), -0.5);
  EXPECT_DOUBLE_EQ(overlap_efficiency(in.machine, LinkTier::intra_node, 65536, 4), 0.25);

  EXPECT_FALSE(overlaps_comm(in, pairs_z));
  const std::string why = overlap_reason(in, pairs_z);
  EXPECT_NE(why.find("(network.intra_node.groups (ranks = 2) overlap in the site: -0.50)"), std::string::npos) << why;
  EXPECT_TRUE(overlaps_comm(in, fours_z));
  const CostEstimate fours = estimate_cost(in, fours_z, predict_step_volume(in, fours_z));
  EXPECT_GT(fours.hidden_s, 0);
  ChooserInput tier_only = in;
  tier_only.machine.intra_node_measured.groups.clear();
  EXPECT_DOUBLE_EQ(fours.hidden_s, estimate_cost(tier_only, fours_z, predict_step_volume(in, fours_z)).hidden_s);

  in.overlap_comm = true;  // forced: the pairs' calls pay their curve
  const CostEstimate forced = estimate_cost(in, pairs_z, predict_step_volume(in, pairs_z));
  ASSERT_GT(forced.overlapped_s, 0);
  EXPECT_DOUBLE_EQ(forced.hidden_s, -0.5 * forced.overlapped_s);

  // A group entry without a curve of its own (fits only) leaves its size to the tier's.
  in.overlap_comm.reset();
  in.machine.intra_node_measured.groups[0].overlap = {};
  EXPECT_DOUBLE_EQ(overlap_efficiency(in.machine, LinkTier::intra_node, 65536, 2), 0.25);
  EXPECT_TRUE(overlaps_comm(in, pairs_z));
}

// A fraction measured at two sizes is interpolated in log(bytes) between them and held beyond
// them; flat(0) is no curve at all.
TEST(OverlapCurve, InterpolatesInLogBytesBetweenTheMeasuredSizesAndHoldsBeyond) {
  EXPECT_TRUE(OverlapCurve::flat(0).empty());
  EXPECT_EQ(OverlapCurve().at(1e6), 0);
  EXPECT_EQ(OverlapCurve::flat(-0.25).at(1), -0.25);
  EXPECT_EQ(OverlapCurve::flat(-0.25).at(1e9), -0.25);
  const OverlapCurve two{{{16384, -0.5}, {262144, 0.5}}};
  EXPECT_EQ(two.at(1024), -0.5);
  EXPECT_EQ(two.at(16384), -0.5);
  EXPECT_DOUBLE_EQ(two.at(65536), 0);  // halfway in log(bytes)
  EXPECT_DOUBLE_EQ(two.at(32768), -0.25);
  EXPECT_EQ(two.at(262144), 0.5);
  EXPECT_EQ(two.at(1e9), 0.5);
  EXPECT_TRUE(two.costs_somewhere());
  EXPECT_FALSE(OverlapCurve::flat(0.5).costs_somewhere());
  EXPECT_EQ(overlap_curve_text(two), "-0.50 at 16 KiB, 0.50 at 256 KiB");
  EXPECT_EQ(overlap_curve_text(OverlapCurve::flat(0.33)), "0.33");
}

// With the overlap measured at sizes, every overlapped call is priced at the fraction for its
// size, and "auto" overlaps where the layout's overlapped calls together hide more than they
// cost: off where they all fall at a size that costs, on where they all fall at one that
// hides, and by the sum where they straddle.
TEST(LayoutCost, AutoOverlapWeighsEachOverlappedCallAtItsSize) {
  ChooserInput in = tiny_input();
  in.model.layers = 2;
  in.machine.tasks_per_node = 8;
  in.machine.peak_flops = 1e8;  // compute outlasts the collectives: no cap on what hides
  const Layout z = parse_layout("1x1x1x2");
  const StepVolume v = predict_step_volume(in, z);
  int64_t smallest = std::numeric_limits<int64_t>::max(), largest = 0;
  for (const CollectiveCalls& c : v.calls)
    if (c.overlapped) smallest = std::min(smallest, c.bytes), largest = std::max(largest, c.bytes);
  ASSERT_LT(smallest, largest);
  const auto small = static_cast<double>(smallest), large = static_cast<double>(largest);

  in.machine.intra_node_measured.overlap = {{{2 * large, -0.5}, {4 * large, 0.5}}};  // all at -0.5
  EXPECT_FALSE(overlaps_comm(in, z));
  EXPECT_EQ(overlap_reason(in, z).rfind("auto: off: on the z axis's intra-node links, with calls of " +
                                            bytes_text(small) + " to " + bytes_text(large),
                                        0),
            0u)
      << overlap_reason(in, z);
  in.machine.intra_node_measured.overlap = {{{small / 4, -0.5}, {small / 2, 0.5}}};  // all at 0.5
  EXPECT_TRUE(overlaps_comm(in, z));
  EXPECT_EQ(overlap_reason(in, z).rfind("auto: on: at the sizes of this layout's overlapped collectives", 0), 0u)
      << overlap_reason(in, z);

  // Straddling: what the forced overlap hides is each call's time at its own size's fraction,
  // and auto follows the sign of the sum.
  std::set<bool> decisions;
  for (const double at_small : {-0.9, 0.0}) {
    in.machine.intra_node_measured.overlap = {{{small, at_small}, {large, 0.1}}};
    in.overlap_comm = true;
    const StepVolume forced = predict_step_volume(in, z);
    double want = 0;
    for (const CollectiveCalls& c : forced.calls)
      if (c.overlapped)
        want += collective_calls_seconds(in.machine, LinkTier::intra_node, c, 2) *
                in.machine.intra_node_measured.overlap.at(static_cast<double>(c.bytes));
    EXPECT_DOUBLE_EQ(estimate_cost(in, z, forced).hidden_s, want) << at_small;
    in.overlap_comm.reset();
    EXPECT_EQ(overlaps_comm(in, z), want >= 0) << at_small << ": " << want;
    decisions.insert(overlaps_comm(in, z));
  }
  EXPECT_EQ(decisions.size(), 2u);  // the sum changed sign between the two
}

// Where ranks share cores, the blocking collectives' time at their tier's and group size's
// time-sharing fraction comes off the step (the group size's own where measured, else the
// tier's), at most the compute not beside a hidden collective; overlapped ones are not filled.
TEST(LayoutCost, TimeSharingFillsTheMeasuredFractionOfTheBlockingCollectives) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  in.machine.peak_flops = 1e8;               // compute outlasts the collectives: no cap below
  const Layout l = parse_layout("2x2x1x2");  // x groups of 2, z groups of 2, data groups of 2, world of 8
  const StepVolume v = predict_step_volume(in, l);
  const CostEstimate none = estimate_cost(in, l, v);
  EXPECT_EQ(none.filled_s, 0);
  // Blocking time per group size, as the model prices it.
  std::map<int, double> blocking;
  for (const CollectiveCalls& c : v.calls) {
    if (c.overlapped) continue;
    const int n = v.group_size[static_cast<size_t>(c.axis)];
    const Link& link = collective_link(in.machine, LinkTier::intra_node, c.kind, c.bytes, n);
    blocking[n] += static_cast<double>(c.calls) * (ring_steps(c.kind, n) * link.latency_s +
                                                   bus_factor(c.kind, n) * static_cast<double>(c.bytes) /
                                                       link.bandwidth_bytes_per_s);
  }
  ASSERT_GT(blocking[2], 0);
  ASSERT_GT(blocking[8], 0);  // the loss's all-reduce over the world
  ASSERT_GT(none.compute_s, blocking[2] + blocking[8]);
  in.machine.intra_node_measured.filled_by_others = 0.25;
  MeasuredGroup pairs;
  pairs.ranks = 2;
  pairs.filled_by_others = 0.5;
  in.machine.intra_node_measured.groups.push_back(pairs);
  const CostEstimate filled = estimate_cost(in, l, v);
  EXPECT_EQ(filled.comm_s, none.comm_s);
  EXPECT_DOUBLE_EQ(filled.filled_s, 0.5 * blocking[2] + 0.25 * blocking[8]);
  EXPECT_DOUBLE_EQ(filled.step_s(), none.step_s() - filled.filled_s);
  // All of it filled, at most the compute: the step is never shorter than its collectives.
  in.machine.intra_node_measured.filled_by_others = 1;
  in.machine.intra_node_measured.groups.clear();
  in.machine.intra_node = {1e3, 1e-3};  // slow: the blocking collectives outlast the compute
  const CostEstimate slow = estimate_cost(in, l, predict_step_volume(in, l));
  EXPECT_DOUBLE_EQ(slow.filled_s, slow.compute_s - slow.hidden_s);
  EXPECT_GE(slow.step_s(), slow.comm_total_s() - slow.hidden_s);
}

// The seconds a collective's own ranks keep the cores busy (every call's time at its tier's
// and group size's cores_busy) are never taken off: hidden and filled together stop at the
// collectives' time less those, so the step is at least compute + busy.
TEST(LayoutCost, CreditsStopAtTheTimeTheCollectivesKeepTheCoresBusy) {
  ChooserInput in = tiny_input();
  in.machine.tasks_per_node = 8;
  in.machine.peak_flops = 1e8;  // compute outlasts the collectives: only the busy cores cap the credits
  const Layout l = parse_layout("2x2x1x2");
  const StepVolume v = predict_step_volume(in, l);
  std::map<int, double> all_calls;  // every call's time per group size, overlapped or not
  bool overlapped = false;
  for (const CollectiveCalls& c : v.calls) {
    const int n = v.group_size[static_cast<size_t>(c.axis)];
    all_calls[n] += collective_calls_seconds(in.machine, LinkTier::intra_node, c, n);
    overlapped = overlapped || c.overlapped;
  }
  ASSERT_TRUE(overlapped);  // the data buckets
  in.machine.intra_node_measured.overlap = OverlapCurve::flat(1);
  in.machine.intra_node_measured.filled_by_others = 1;
  const CostEstimate free = estimate_cost(in, l, v);
  ASSERT_GT(free.compute_s, free.comm_total_s());
  EXPECT_EQ(free.busy_s, 0);
  EXPECT_DOUBLE_EQ(free.hidden_s + free.filled_s, free.comm_total_s());  // unmeasured: nothing busy

  in.machine.intra_node_measured.cores_busy = 0.25;
  MeasuredGroup pairs;
  pairs.ranks = 2;
  pairs.filled_by_others = 1;
  pairs.cores_busy = 0.75;
  in.machine.intra_node_measured.groups.push_back(pairs);
  const CostEstimate busy = estimate_cost(in, l, v);
  EXPECT_EQ(busy.comm_s, free.comm_s);
  EXPECT_DOUBLE_EQ(busy.busy_s, 0.75 * all_calls[2] + 0.25 * all_calls[8]);
  EXPECT_DOUBLE_EQ(busy.hidden_s + busy.filled_s, busy.comm_total_s() - busy.busy_s);
  EXPECT_DOUBLE_EQ(busy.step_s(), busy.compute_s + busy.busy_s);
  EXPECT_LE(busy.hidden_s, free.hidden_s);  // the hidden credit first, the fill from what is left

  // Every core busy: nothing comes off.
  in.machine.intra_node_measured.cores_busy = 1;
  in.machine.intra_node_measured.groups[0].cores_busy = 1;
  const CostEstimate all = estimate_cost(in, l, v);
  EXPECT_EQ(all.hidden_s, 0);
  EXPECT_EQ(all.filled_s, 0);
  EXPECT_DOUBLE_EQ(all.step_s(), all.compute_s + all.comm_total_s());
}

// Each linear layer's forward, dX and dW GEMMs (6 m k n per micro-batch and layer) run at the
// rate measured for their shape; attention, and any shape without a rate, at the measured
// GEMM rate. By hand for 1x2x1x2 of the model below: A = 2 micro-batches of m = 8 tokens.
TEST(LayoutCalibrated, PricesEachGemmAtTheRateOfItsShape) {
  ChooserInput in = tiny_input();
  in.model = {2, 16, 2, 32, 8};  // L=2, C=16, H=2, V=32, T=8
  in.batch = {4, 1, ElementType::float32};
  in.machine.tasks_per_node = 4;
  const Layout l = parse_layout("1x2x1x2");  // x = 2, z = 2: 2 sequences per rank, mb = 1
  const auto shapes = local_gemm_shapes(in, l);
  // qkv (m, C/x, 3C), attn.proj (m, C, C/x), mlp.fc (m, C/x, 4C), mlp.proj (m, 4C, C/x), head (m, C/x, V)
  EXPECT_EQ(shapes[0], (GemmShape{8, 8, 48}));
  EXPECT_EQ(shapes[1], (GemmShape{8, 16, 8}));
  EXPECT_EQ(shapes[2], (GemmShape{8, 8, 64}));
  EXPECT_EQ(shapes[3], (GemmShape{8, 64, 8}));
  EXPECT_EQ(shapes[4], (GemmShape{8, 8, 32}));
  in.machine.gemm_flops = 2e9;
  in.machine.gemm_rates = {{shapes[0], 1e9}, {shapes[2], 4e9}, {{8, 8, 49}, 1.0}};  // the last one matches nothing
  const double attention = 2 * 12.0 * 1 * (2 / 1) * 8 * 8 * 8;  // L * 12 * mb * (H/G_y) * T^2 * (C/H)
  const double per_micro = 6.0 * 2 * 8 * 8 * 48 / 1e9 + 6.0 * 2 * 8 * 16 * 8 / 2e9 + 6.0 * 2 * 8 * 8 * 64 / 4e9 +
                           6.0 * 2 * 8 * 64 * 8 / 2e9 + 6.0 * 1 * 8 * 8 * 32 / 2e9 + attention / 2e9;
  // Recomputation reruns, for the L - 1 = 1 recomputed block, the qkv forward (attention) or
  // the qkv, attn.proj and mlp.fc forwards (block), and the attention forward: 4 of the 12 of
  // one block's attention FLOPs.
  const double qkv = 2.0 * 8 * 8 * 48 / 1e9, proj = 2.0 * 8 * 16 * 8 / 2e9, fc = 2.0 * 8 * 8 * 64 / 4e9;
  const double attend = attention / 2 / 3 / 2e9;
  const std::map<Recompute, double> rerun = {
      {Recompute::none, 0}, {Recompute::attention, qkv + attend}, {Recompute::block, qkv + proj + fc + attend}};
  for (const Recompute mode : kRecomputeModes) {
    const CostEstimate c = estimate_cost(in, l, predict_step_volume(in, l, mode), mode);
    EXPECT_NEAR(c.compute_s, 2 * (per_micro + rerun.at(mode)), 1e-12 * c.compute_s) << recompute_name(mode);
    EXPECT_DOUBLE_EQ(c.flops, flops_per_rank(in, l)) << "the model's FLOPs do not depend on the rates";
  }
}

// A measured attention rate prices attention (forward, backward and the recomputed forward);
// the GEMMs keep theirs.
TEST(LayoutCalibrated, AttentionAtItsMeasuredRate) {
  ChooserInput in = tiny_input();
  in.model = {2, 16, 2, 32, 8};
  in.batch = {4, 1, ElementType::float32};
  in.machine.gemm_flops = 2e9;
  const Layout l = parse_layout("1x2x1x2");
  const double attention = 2 * 12.0 * 1 * 2 * 8 * 8 * 8;  // L * 12 * mb * (H/G_y) * T^2 * (C/H), per micro-batch
  for (const Recompute mode : kRecomputeModes) {
    const StepVolume v = predict_step_volume(in, l, mode);
    ChooserInput measured = in;
    measured.machine.attention_flops = 5e8;
    const double at_gemm = estimate_cost(in, l, v, mode).compute_s;
    const double at_own = estimate_cost(measured, l, v, mode).compute_s;
    const double rerun = mode == Recompute::none ? 0 : attention / 2 / 3;  // one block's forward: 4 of its 12
    // A = 2 micro-batches.
    EXPECT_NEAR(at_own - at_gemm, 2 * (attention + rerun) * (1 / 5e8 - 1 / 2e9), 1e-12 * at_own) << recompute_name(mode);
  }
  ChooserInput only_attention = in;  // attention alone measured is a calibrated machine too
  only_attention.machine.gemm_flops = 0;
  only_attention.machine.attention_flops = 5e8;
  EXPECT_TRUE(only_attention.machine.calibrated_compute());
}

// The calibrated path and the uncalibrated formula are the same arithmetic: at a measured
// rate equal to peak x efficiency for every shape they give the same compute time.
TEST(LayoutCalibrated, ComputeAtPeakTimesEfficiencyIsTheUncalibratedCompute) {
  ChooserInput in = tiny_input();
  in.model = {4, 64, 4, 128, 16};
  in.batch = {8, 2, ElementType::float32};
  in.machine.tasks_per_node = 8;
  ChooserInput calibrated = in;
  calibrated.machine.gemm_flops = in.machine.peak_flops * in.machine.compute_efficiency;
  int checked = 0;
  for (const Layout& l : enumerate_layouts(8)) {
    if (!divisibility_problem(in.model, in.batch, l).empty()) continue;
    for (const Recompute mode : kRecomputeModes) {
      const StepVolume v = predict_step_volume(in, l, mode);
      const double plain = estimate_cost(in, l, v, mode).compute_s;
      EXPECT_NEAR(estimate_cost(calibrated, l, v, mode).compute_s, plain, 1e-12 * plain)
          << format_layout_with_order(l) << " " << recompute_name(mode);
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

// A CPU run with fewer ranks on a node than the site's GPUs per node gives each more of its
// cores: the measured rates scale with the peak (train_command.cpp).
TEST(LayoutCalibrated, ScaleComputeScalesPeakAndMeasuredRates) {
  Machine m;
  m.gemm_flops = 2e10;
  m.gemm_rates = {{{8, 8, 8}, 1e10}};
  m.elementwise_bytes_per_s = 3e9;
  m.attention_flops = 5e9;
  scale_compute(m, 2.0);
  EXPECT_EQ(m.attention_flops, 1e10);
  EXPECT_EQ(m.peak_flops, 2e12);
  EXPECT_EQ(m.gemm_flops, 4e10);
  EXPECT_EQ(m.gemm_rates[0].flops_per_s, 2e10);
  EXPECT_EQ(m.elementwise_bytes_per_s, 6e9);
}

// ---- the memory-bound ops (memory_bound_bytes.hpp), by hand for 1x2x1x2 of the model
// L=2, C=16, H=2, V=32, T=8, batch 4 in micro-batches of 1: z = 2 gives 2 sequences per
// rank, A = 2 micro-batches of m = 8 tokens; x = 2 shards the residual stream, (8, 8).

ChooserInput memory_bound_input(bool epilogues) {
  ChooserInput in = tiny_input();
  in.model = {2, 16, 2, 32, 8};
  in.batch = {4, 1, ElementType::float32};
  in.machine.gemm_epilogues = epilogues;
  return in;
}

// The parameters' part, per step: AdamW 28 bytes per owned parameter, zeroing 4 per held one.
double optimizer_bytes(const ChooserInput& in, const Layout& l, bool shard) {
  const ShardedCount held = sharded_count(in.model, l, shard);
  return 28.0 * static_cast<double>(held.owned) + 4.0 * static_cast<double>(held.stored);
}

TEST(MemoryBoundBytes, SeparatePassesByHand) {
  const ChooserInput in = memory_bound_input(false);
  const Layout l = parse_layout("1x2x1x2");
  // Residual (8, 8) = 64 elements; layer outputs qkv (8, 48), attn.proj (8, 8), mlp.fc (8, 64),
  // mlp.proj (8, 8): 1024 elements, mlp.fc's 512 of them.
  const double forward = 2 * 4 * 64 + 2 * 1024 + 2 * 512;  // LayerNorms, biases, GELU
  const double backward = 2 * 4 * 64 + 1024 + 3 * 512;     // LayerNorms, column sums, GELU
  const double head = 6 * 64 + 3 * 8 * 32;                 // ln_f, cross-entropy over (8, 32)
  const double per_micro = (2 * (forward + backward) + head) * 4;
  EXPECT_DOUBLE_EQ(memory_bound_bytes_per_rank(in, l, Recompute::none), 2 * per_micro + optimizer_bytes(in, l, false));
  // Recomputation at block reruns, in L - 1 = 1 block, both LayerNorms, the biases of qkv,
  // attn.proj and mlp.fc (2 * (384 + 64 + 512)) and GELU's forward.
  const double rerun = (2 * 4 * 64 + 2 * (384 + 64 + 512) + 2 * 512) * 4.0;
  EXPECT_DOUBLE_EQ(memory_bound_bytes_per_rank(in, l, Recompute::block),
                   2 * (per_micro + rerun) + optimizer_bytes(in, l, false));
  // attention: ln1 and qkv's bias.
  EXPECT_DOUBLE_EQ(memory_bound_bytes_per_rank(in, l, Recompute::attention),
                   2 * (per_micro + (4 * 64 + 2 * 384) * 4.0) + optimizer_bytes(in, l, false));
  // A sharded optimizer updates a half of the parameters on each of the data ranks.
  const Layout data2 = parse_layout("2x2x1x1");
  EXPECT_LT(memory_bound_bytes_per_rank(in, data2, {Recompute::none, true}),
            memory_bound_bytes_per_rank(in, data2, {Recompute::none, false}));
}

// Inside the GEMMs where no collective sits between the pieces: at x = 2 the biases of
// attn.proj and mlp.proj (k-axis y, size 1) and every bias gradient; GELU stays separate.
// At x = 1 GELU moves only its pre-activation, written and read once.
TEST(MemoryBoundBytes, EpiloguesTakeBiasAndGeluIntoTheGemmsWhereNoCollectiveIsBetween) {
  const ChooserInput in = memory_bound_input(true);
  const Layout l = parse_layout("1x2x1x2");
  const double forward = 2 * 4 * 64 + 2 * (384 + 512) + 2 * 512;
  const double backward = 2 * 4 * 64 + 3 * 512;
  const double head = 6 * 64 + 3 * 8 * 32;
  const double per_micro = (2 * (forward + backward) + head) * 4;
  EXPECT_DOUBLE_EQ(memory_bound_bytes_per_rank(in, l, Recompute::none), 2 * per_micro + optimizer_bytes(in, l, false));

  const Layout y2 = parse_layout("1x1x2x2");  // residual (8, 16); qkv (8, 24), mlp.fc (8, 32) over y
  const double forward_y = 2 * 4 * 128 + 2 * (8 * 16 + 8 * 16) + 8 * 32;  // attn.proj, mlp.proj biases (k-axis y)
  const double backward_y = 2 * 4 * 128 + 8 * 32;
  const double head_y = 6 * 128 + 3 * 8 * 16;
  EXPECT_DOUBLE_EQ(memory_bound_bytes_per_rank(in, y2, Recompute::none),
                   2 * (2 * (forward_y + backward_y) + head_y) * 4 + optimizer_bytes(in, y2, false));
}

// bf16 activations halve the activation bytes and add the bf16 copy of the big weights.
TEST(MemoryBoundBytes, Bf16HalvesActivationBytesAndCopiesTheWeights) {
  ChooserInput in = memory_bound_input(false);
  const Layout l = parse_layout("1x2x1x2");
  const double f32 = memory_bound_bytes_per_rank(in, l, Recompute::none) - optimizer_bytes(in, l, false);
  in.batch.dtype = ElementType::bfloat16;
  const double bf16 = memory_bound_bytes_per_rank(in, l, Recompute::none) - optimizer_bytes(in, l, false);
  const double big = static_cast<double>(parameters_per_rank(in.model, l).big);
  EXPECT_DOUBLE_EQ(bf16, f32 / 2 + 2 * 6 * big);
}

// With a measured elementwise rate the memory-bound bytes are priced into the compute time;
// without one nothing changes (peak x efficiency stands for everything, as before).
TEST(MemoryBoundBytes, TheMeasuredRatePricesThemIntoComputeTime) {
  ChooserInput in = memory_bound_input(false);
  in.machine.gemm_flops = 2e9;
  const Layout l = parse_layout("1x2x1x2");
  const StepVolume v = predict_step_volume(in, l, Recompute::none);
  const CostEstimate before = estimate_cost(in, l, v, Recompute::none);
  EXPECT_EQ(before.memory_bound_s, 0);
  in.machine.elementwise_bytes_per_s = 5e9;
  const CostEstimate after = estimate_cost(in, l, v, Recompute::none);
  const double bytes = memory_bound_bytes_per_rank(in, l, Recompute::none);
  EXPECT_DOUBLE_EQ(after.memory_bound_s, bytes / 5e9);
  EXPECT_NEAR(after.compute_s, before.compute_s + bytes / 5e9, 1e-12 * after.compute_s);
  EXPECT_DOUBLE_EQ(after.step_s() - before.step_s(), after.compute_s - before.compute_s);
}

// --explain says what was measured, so a reader knows which figures are guesses.
TEST(LayoutCalibrated, ExplainSaysWhatWasMeasured) {
  ChooserInput in = tiny_input();
  EXPECT_EQ(format_explain(choose_layout(in), 3).find("measured"), std::string::npos);
  in.machine.gemm_flops = 3e10;
  in.machine.gemm_rates = {{{4, 4, 12}, 1e10}};
  in.machine.intra_node_measured.kinds[static_cast<size_t>(CollectiveKind::all_gather)] = Link{2e9, 40e-6};
  const std::string text = format_explain(choose_layout(in), 3);
  EXPECT_NE(text.find("measured compute: each linear layer's GEMMs at the rate measured for its shape (1 shape(s)), "
                      "else and for attention at 3e+10 FLOP/s (measured)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("measured intra-node all_gather: alpha 40 us, beta 2 GB/s"), std::string::npos) << text;
}

// ---- the alpha-beta fit of calibrate (alpha_beta_fit.hpp).

// Times of the ring formula for 4 KiB .. 256 MiB, each times (1 + noise[i % noise.size()]).
std::vector<CollectiveSample> ring_times(CollectiveKind kind, int n, double alpha, double beta,
                                         const std::vector<double>& noise = {}) {
  std::vector<CollectiveSample> samples;
  size_t i = 0;
  for (double bytes = 4096; bytes <= 256.0 * 1024 * 1024; bytes *= 2, ++i) {
    const double t = alpha * ring_steps(kind, n) + bytes * bus_factor(kind, n) / beta;
    samples.push_back({bytes, t * (1 + (noise.empty() ? 0 : noise[i % noise.size()]))});
  }
  return samples;
}

TEST(AlphaBetaFit, RecoversAlphaAndBetaOfEveryKindFromExactTimes) {
  for (const CollectiveKind kind : kCalibratedKindsForTest)
    for (const int n : {2, 3, 8}) {
      const AlphaBetaFit fit = fit_alpha_beta(kind, LinkTier::intra_node, n, ring_times(kind, n, 30e-6, 2e9));
      EXPECT_NEAR(fit.latency_s, 30e-6, 1e-9 * 30e-6) << collective_name(kind) << " n " << n;
      EXPECT_NEAR(fit.bandwidth_bytes_per_s, 2e9, 1e-9 * 2e9) << collective_name(kind) << " n " << n;
      EXPECT_LT(fit.residual, 1e-9);
      EXPECT_EQ(fit.link().latency_s, fit.latency_s);
      EXPECT_EQ(fit.link().bandwidth_bytes_per_s, fit.bandwidth_bytes_per_s);
    }
}

// Two paths (Gloo's one-step exchange up to 64 KiB, its ring above): each side gets its own
// line back, and the residual is that of the two lines together (0 for exact times).
TEST(AlphaBetaFit, PiecewiseFitsEachPathApartAtTheCommunicatorsSwitch) {
  const double split = 64 * 1024;
  std::vector<CollectiveSample> samples;
  for (const CollectiveSample& s : ring_times(CollectiveKind::all_reduce, 2, 20e-6, 1e9))
    if (s.bytes <= split) samples.push_back(s);
  for (const CollectiveSample& s : ring_times(CollectiveKind::all_reduce, 2, 500e-6, 2e9))
    if (s.bytes > split) samples.push_back(s);
  const PiecewiseFit fit = fit_piecewise(CollectiveKind::all_reduce, LinkTier::intra_node, 2, samples, split);
  ASSERT_TRUE(fit.small.has_value());
  EXPECT_EQ(fit.small_max_bytes, split);
  EXPECT_NEAR(fit.small->latency_s, 20e-6, 1e-9 * 20e-6);
  EXPECT_NEAR(fit.small->bandwidth_bytes_per_s, 1e9, 1e-9 * 1e9);
  EXPECT_NEAR(fit.fit.latency_s, 500e-6, 1e-9 * 500e-6);
  EXPECT_NEAR(fit.fit.bandwidth_bytes_per_s, 2e9, 1e-9 * 2e9);
  EXPECT_LT(fit.residual, 1e-9);
  // One line cannot follow both: fitted as one, the same times leave a large residual.
  EXPECT_GT(fit_alpha_beta(CollectiveKind::all_reduce, LinkTier::intra_node, 2, samples, 10).residual, 0.3);
  // A side whose times do not grow with the size (all latency, and noise): one line over all.
  std::vector<CollectiveSample> flat_small = samples;
  for (CollectiveSample& s : flat_small)
    if (s.bytes <= split) s.seconds = 30e-6 - s.bytes * 1e-12;
  const PiecewiseFit flat =
      fit_piecewise(CollectiveKind::all_reduce, LinkTier::intra_node, 2, flat_small, split, 10);
  EXPECT_FALSE(flat.small.has_value());
  EXPECT_EQ(flat.small_max_bytes, 0);
  EXPECT_EQ(flat.residual, flat.fit.residual);
  // No switch, or a side with fewer than two sizes: one line over every sample.
  for (const double none : {0.0, 4096.0, 128.0 * 1024 * 1024}) {
    const PiecewiseFit one =
        fit_piecewise(CollectiveKind::all_reduce, LinkTier::intra_node, 2, ring_times(CollectiveKind::all_reduce, 2, 30e-6, 2e9), none);
    EXPECT_FALSE(one.small.has_value()) << none;
    EXPECT_EQ(one.small_max_bytes, 0) << none;
    EXPECT_NEAR(one.fit.latency_s, 30e-6, 1e-9 * 30e-6) << none;
  }
}

// Relative noise of a few percent moves the fit by about as much, and shows in the residual.
TEST(AlphaBetaFit, NoisyTimesGiveCloseFiguresAndTheirResidual) {
  const auto samples = ring_times(CollectiveKind::all_gather, 4, 100e-6, 1e10, {0.03, -0.02, 0.01, -0.03});
  const AlphaBetaFit fit = fit_alpha_beta(CollectiveKind::all_gather, LinkTier::inter_node, 4, samples);
  EXPECT_NEAR(fit.latency_s, 100e-6, 0.05 * 100e-6);
  EXPECT_NEAR(fit.bandwidth_bytes_per_s, 1e10, 0.05 * 1e10);
  EXPECT_GT(fit.residual, 0.01);
  EXPECT_LT(fit.residual, 0.03);
}

// The small sizes faster than the line through the large ones allows (a loaded machine, a
// faster small-message protocol): the free line's alpha is negative, and the fit is the best
// line with alpha = 0 instead, whose residual then says how good it is.
TEST(AlphaBetaFit, ANegativeLatencyIsClampedToTheBestLineThroughTheOrigin) {
  std::vector<CollectiveSample> negative;
  for (double bytes = 1 << 20; bytes <= 256.0 * 1024 * 1024; bytes *= 2)
    negative.push_back({bytes, bytes / 1e9 - 1e-4});
  const AlphaBetaFit fit = fit_alpha_beta(CollectiveKind::all_reduce, LinkTier::intra_node, 4, negative);
  EXPECT_EQ(fit.latency_s, 0);
  // Through the origin the slope is a little under 1 ns per bus byte (bus factor 3/2 at n = 4),
  // pulled down by the small sizes, which run 10% under the line at 1 MiB.
  EXPECT_GT(fit.bandwidth_bytes_per_s, 1.5e9);
  EXPECT_LT(fit.bandwidth_bytes_per_s, 1.5e9 * 1.1);
  EXPECT_GT(fit.residual, 0.001);
  EXPECT_LT(fit.residual, 0.05);
  double squares = 0;  // the residual is the one of the clamped line
  for (const CollectiveSample& s : negative) {
    const double predicted = s.bytes * bus_factor(CollectiveKind::all_reduce, 4) / fit.bandwidth_bytes_per_s;
    squares += (s.seconds - predicted) * (s.seconds - predicted) / (s.seconds * s.seconds);
  }
  EXPECT_NEAR(fit.residual, std::sqrt(squares / static_cast<double>(negative.size())), 1e-12);
}

std::string fit_error(CollectiveKind kind, LinkTier tier, const std::vector<CollectiveSample>& samples,
                      double max_residual = kDefaultMaxResidual) {
  try {
    fit_alpha_beta(kind, tier, 4, samples, max_residual);
  } catch (const CalibrationError& e) {
    EXPECT_EQ(e.exit_code(), 1);
    return e.what();
  }
  return "(no error)";
}

TEST(AlphaBetaFit, ANonConvergingFitIsAnErrorNamingTheCollectiveTheTierAndWhatToTry) {
  // Times that shrink with the size: no positive bandwidth.
  std::vector<CollectiveSample> shrinking;
  double t = 1e-2;
  for (double bytes = 4096; bytes <= 4e6; bytes *= 2, t *= 0.8) shrinking.push_back({bytes, t});
  std::string e = fit_error(CollectiveKind::reduce_scatter, LinkTier::inter_node, shrinking);
  EXPECT_NE(e.find("reduce_scatter fit over inter-node links"), std::string::npos) << e;
  EXPECT_NE(e.find("beta (bandwidth) came out negative"), std::string::npos) << e;
  EXPECT_NE(e.find("without --quick"), std::string::npos) << e;

  // Times no line follows: the residual is over the bound, and the bound is an option.
  std::vector<CollectiveSample> bent;
  for (double bytes = 4096; bytes <= 256.0 * 1024 * 1024; bytes *= 2) bent.push_back({bytes, 1e-6 * std::sqrt(bytes)});
  e = fit_error(CollectiveKind::all_gather, LinkTier::inter_switch, bent);
  EXPECT_NE(e.find("all_gather fit over inter-switch links"), std::string::npos) << e;
  EXPECT_NE(e.find("is above the bound 0.500"), std::string::npos) << e;
  EXPECT_NE(e.find("--max-residual"), std::string::npos) << e;
  EXPECT_EQ(fit_error(CollectiveKind::all_gather, LinkTier::inter_switch, bent, 10.0), "(no error)");

  // One size cannot tell alpha from beta; a time of zero is no measurement.
  e = fit_error(CollectiveKind::all_gather, LinkTier::intra_node, {{4096, 1e-4}, {4096, 1.1e-4}});
  EXPECT_NE(e.find("needs at least two message sizes, got 1"), std::string::npos) << e;
  e = fit_error(CollectiveKind::all_gather, LinkTier::intra_node, {{4096, 1e-4}, {8192, 0}});
  EXPECT_NE(e.find("every sample needs a positive size and time"), std::string::npos) << e;
}

}  // namespace
}  // namespace axonn
