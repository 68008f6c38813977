// The layout model of an MoE model with expert parallelism E_p = P > 1 (docs/moe.md): each
// rank holds E/P experts, the routed rows go all-to-all over the expert axis, the experts'
// gradients are reduced over expert_data. Every number here is computed by hand from a tiny
// model; the trainer's counters must equal the same predictions.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "layout/layout_cost.hpp"
#include "layout/layout_memory.hpp"
#include "layout/layout_report.hpp"
#include "layout/layout_search.hpp"
#include "layout/layout_volume.hpp"
#include "layout/model_plan.hpp"
#include "tiny_moe_input.hpp"

namespace axonn {
namespace {

using K = CollectiveKind;
using Volume = std::pair<int64_t, int64_t>;  // calls, bytes

// tiny_moe_input with H = 2 on one node of 32 ranks.
ChooserInput moe_input() { return test::tiny_moe_input(2, 1, 32); }

Volume at(const StepVolume& v, CommAxis a, K k) { return {v.at(a, k).calls, v.at(a, k).bytes}; }

TEST(LayoutMoe, MoeShapeSplitsTheExpertsAndSizesTheReceivingSide) {
  ChooserInput in = moe_input();
  const Layout p2 = parse_layout("4x2x2x2e2"), p4 = parse_layout("8x2x1x1e4");
  const BatchSplit split = batch_split(in.model, in.batch, p2);
  ASSERT_EQ(split.tokens, 8);
  MoeShape s = moe_shape(in.model, split, p2);
  EXPECT_EQ(s.local_experts, 2);
  EXPECT_EQ(s.rows, 16);
  EXPECT_EQ(s.expert_rows, 2 * 16);  // dropless: every row of both ranks of the group
  EXPECT_TRUE(s.rows_vary());
  s = moe_shape(in.model, batch_split(in.model, in.batch, p4), p4);
  EXPECT_EQ(s.local_experts, 1);
  EXPECT_EQ(s.expert_rows, 4 * 16);
  // The 2-argument form: P = 1, nothing exchanged.
  s = moe_shape(in.model, split);
  EXPECT_EQ(s.local_experts, 4);
  EXPECT_EQ(s.expert_rows, 16);
  EXPECT_FALSE(s.rows_vary());
  // A capacity of ceil(1.5·T·k/E) = 3 slots: R = E·mb·3 = 24 on either side at any P.
  in.model.capacity_factor = 1.5;
  s = moe_shape(in.model, split, p2);
  EXPECT_EQ(s.rows, 24);
  EXPECT_EQ(s.expert_rows, 24);
  EXPECT_FALSE(s.rows_vary());
  // E_p must divide E.
  in.model.experts = 6;
  EXPECT_THROW(moe_shape(in.model, split, parse_layout("4x2x2x2e4")), LayoutError);
}

// Per rank at 4x2x2x2 (tensor 8): an MoE block's attention 4C²/8 = 32, E_l experts' fc and
// proj E_l·8C²/8 = 64·E_l, their biases E_l·(4C/G_y + C/G_x) = 20·E_l.
TEST(LayoutMoe, ParametersAndBucketsHoldTheLocalExpertsOnly) {
  const ChooserInput in = moe_input();
  const Layout p1 = parse_layout("4x2x2x2"), p2 = parse_layout("4x2x2x2e2");
  const ParameterCount one = parameters_per_rank(in.model, p1), two = parameters_per_rank(in.model, p2);
  EXPECT_EQ(one.big - two.big, 2 * 64);
  EXPECT_EQ(one.small - two.small, 2 * 20);
  const GradientBuckets b = gradient_buckets(in.model, p2);
  EXPECT_EQ(b.block, 12 * 64 / 8);
  EXPECT_EQ(b.moe_attention, 32);
  EXPECT_EQ(b.moe_experts, 2 * 64);
  EXPECT_EQ(b.small_experts, 2 * 20);
  // "small": block 0's LayerNorms 4·C/G_x = 16 and biases 3C/G_y + C/G_x + 4C/G_y + C/G_x = 36,
  // block 1's LayerNorms 16, qkv and attn.proj biases 12 + 4, router C/G_x·E = 16, ln_f 8, wpe 16.
  EXPECT_EQ(b.small, 16 + 36 + 16 + 16 + 16 + 8 + 16);
  EXPECT_EQ(b.wte, 16 * 8 / 8);
  // Every parameter once.
  EXPECT_EQ(b.block + b.moe_attention + b.moe_experts + b.wte + b.small + b.small_experts, two.total());
  EXPECT_EQ(gradient_buckets(in.model, p1).moe_experts, 4 * 64);
  EXPECT_EQ(expert_reduce_axis(p2), CommAxis::expert_data);
  EXPECT_EQ(expert_reduce_axis(p1), CommAxis::data);
}

// 4x2x2x2e2, dropless, float32: c = C/G_x = 4, h = 4C/G_y = 16, R = 16, E_l = 2, one MoE
// layer and one micro-batch per step.
TEST(LayoutMoe, VolumeAtTwoExpertRanksDropless) {
  const ChooserInput in = moe_input();
  const Layout p1 = parse_layout("4x2x2x2"), p2 = parse_layout("4x2x2x2e2");
  const StepVolume one = predict_step_volume(in, p1), two = predict_step_volume(in, p2);
  EXPECT_EQ(two.group_size[static_cast<size_t>(CommAxis::expert)], 2);
  EXPECT_EQ(two.group_size[static_cast<size_t>(CommAxis::expert_data)], 2);
  // Expert axis, split over the G_y = 2 ranks holding the same rows: the counts E·4 = 16; this
  // rank's half of the rows out, R/2·c·4 = 128, and of their gradients out, of the outputs
  // back and of the rows' gradients back, R_r/2·c·4 = 128 each (R_r predicted as R).
  EXPECT_EQ(at(two, CommAxis::expert, K::all_to_all), (Volume{5, 16 + 4 * 128}));
  EXPECT_EQ(at(one, CommAxis::expert, K::all_to_all), (Volume{0, 0}));
  // y: each exchange's halves gathered, two copies of this rank's half: R_r·c·4 = 256 after
  // the rows go out (forward and backward), R·c·4 = 256 after they come back.
  EXPECT_EQ(at(two, CommAxis::y, K::all_to_all), (Volume{4, 4 * 256}));
  EXPECT_EQ(at(one, CommAxis::y, K::all_to_all), (Volume{0, 0}));
  // x and y: the sums over all received rows, R_r = R: the same as at P = 1.
  EXPECT_EQ(at(two, CommAxis::x, K::all_reduce), at(one, CommAxis::x, K::all_reduce));
  EXPECT_EQ(at(two, CommAxis::y, K::all_reduce), at(one, CommAxis::y, K::all_reduce));
  // z: 2·E_l = 4 gathers and reduce-scatters of the expert block c·h = 64 (256 bytes), not 8.
  EXPECT_EQ(at(one, CommAxis::z, K::all_gather).first - at(two, CommAxis::z, K::all_gather).first, 4);
  EXPECT_EQ(at(one, CommAxis::z, K::all_gather).second - at(two, CommAxis::z, K::all_gather).second, 4 * 256);
  EXPECT_EQ(at(one, CommAxis::z, K::reduce_scatter).first - at(two, CommAxis::z, K::reduce_scatter).first, 4);
  EXPECT_EQ(at(one, CommAxis::z, K::reduce_scatter).second - at(two, CommAxis::z, K::reduce_scatter).second,
            4 * 256);
  // z all-reduces: the statistics (2E+1)·4 = 36, "small" and "small.experts" (E_l·20·4 = 160).
  const GradientBuckets b = gradient_buckets(in.model, p2);
  EXPECT_EQ(at(two, CommAxis::z, K::all_reduce), (Volume{3, 36 + b.small * 4 + 160}));
  // expert_data: block 1's experts 128·4 and small.experts 40·4.
  EXPECT_EQ(at(two, CommAxis::expert_data, K::all_reduce), (Volume{2, 512 + 160}));
  // data: the statistics, block 0, block 1's attention 32·4, wte, small.
  EXPECT_EQ(at(two, CommAxis::data, K::all_reduce), (Volume{5, 36 + (b.block + 32 + b.wte + b.small) * 4}));
  // At P = 1 the experts' buckets (E = 4: 256 and 80 elements) go over data too.
  EXPECT_EQ(at(one, CommAxis::data, K::all_reduce),
            (Volume{7, 36 + (b.block + 32 + 256 + b.wte + b.small + 80) * 4}));
  EXPECT_EQ(at(one, CommAxis::expert_data, K::all_reduce), (Volume{0, 0}));
  // What varies with the routing: the received rows' collectives, dropless at P > 1 only.
  for (const auto& [axis, kind] : {std::pair{CommAxis::x, K::all_reduce}, std::pair{CommAxis::y, K::all_reduce},
                                   std::pair{CommAxis::expert, K::all_to_all}, std::pair{CommAxis::y, K::all_to_all}}) {
    EXPECT_TRUE(two.varies(axis, kind)) << comm_axis_name(axis);
    EXPECT_FALSE(one.varies(axis, kind)) << comm_axis_name(axis);
  }
  EXPECT_FALSE(two.varies(CommAxis::z, K::all_gather));
  EXPECT_FALSE(two.varies(CommAxis::data, K::all_reduce));
  EXPECT_FALSE(two.varies(CommAxis::expert_data, K::all_reduce));
  // The bound: the two return calls at R_max = 2R = 32 rows, half of them this rank's, 256
  // bytes each.
  EXPECT_EQ(expert_all_to_all_bound(in, p2), 16 + 2 * 128 + 2 * 256);
  EXPECT_EQ(expert_all_to_all_bound(in, p1), 0);
}

// The y ranks split the exchange when there is one (P > 1) and G_y divides the send rows; a
// rank's share is exact unless the routing or an uneven per-peer block makes it vary.
TEST(LayoutMoe, TheYGroupSplitsTheExchangeWhenItDividesTheRows) {
  ChooserInput in = moe_input();
  BatchSplit split;
  split.micro_batch = 2;
  split.tokens = 2 * in.model.sequence;  // m = 8, R = m·k = 16 dropless
  EXPECT_EQ(moe_shape(in.model, split, parse_layout("4x2x2x2e2")).y_shares, 2);
  EXPECT_TRUE(moe_shape(in.model, split, parse_layout("4x2x2x2e2")).shares_vary());  // dropless
  EXPECT_EQ(moe_shape(in.model, split, parse_layout("4x2x2x2")).y_shares, 1);        // no exchange
  EXPECT_EQ(moe_shape(in.model, split, parse_layout("4x2x1x2e2")).y_shares, 1);      // G_y = 1
  in.model.capacity_factor = 1.0;  // cap = ceil(4·2/4) = 2: per-peer blocks E_l·mb·cap = 2·2·2 = 8, R = 16
  const MoeShape even = moe_shape(in.model, split, parse_layout("4x1x2x2e2"));
  EXPECT_EQ(even.y_shares, 2);
  EXPECT_FALSE(even.shares_vary());
  const MoeShape four = moe_shape(in.model, split, parse_layout("2x1x4x2e2"));  // 8 % 4 == 0: exact
  EXPECT_EQ(four.y_shares, 4);
  EXPECT_FALSE(four.shares_vary());
  split.micro_batch = 1;
  split.tokens = in.model.sequence;  // R = E·mb·cap = 8 rows: G_y = 16 does not divide them
  EXPECT_EQ(moe_shape(in.model, split, parse_layout("2x1x16x1e2")).y_shares, 1);
  EXPECT_EQ(moe_shape(in.model, split, parse_layout("2x1x8x1e2")).y_shares, 8);
  EXPECT_TRUE(moe_shape(in.model, split, parse_layout("2x1x8x1e2")).shares_vary());  // blocks of 2·1·2 = 4 rows
}

// 8x2x1x1e4 (world 16): E_l = 1, c = 4, h = 32, no z; expert_data groups of 2; m = 8.
TEST(LayoutMoe, VolumeAtFourExpertRanksCapacityAndDropless) {
  ChooserInput in = moe_input();
  const Layout p4 = parse_layout("8x2x1x1e4"), p1 = parse_layout("8x2x1x1");
  // Dropless: counts 16, rows out and gradients out R·c·4 = 256, back R_r·c·4 = 256.
  StepVolume v = predict_step_volume(in, p4);
  EXPECT_EQ(at(v, CommAxis::expert, K::all_to_all), (Volume{5, 16 + 4 * 256}));
  EXPECT_EQ(at(v, CommAxis::x, K::all_reduce), at(predict_step_volume(in, p1), CommAxis::x, K::all_reduce));
  // The one local expert's fc and proj 8C²/G_x = 256 elements, its biases 4C + C/G_x = 36.
  EXPECT_EQ(at(v, CommAxis::expert_data, K::all_reduce), (Volume{2, (256 + 36) * 4}));
  EXPECT_TRUE(v.varies(CommAxis::x, K::all_reduce));
  EXPECT_TRUE(v.varies(CommAxis::expert, K::all_to_all));
  EXPECT_FALSE(v.varies(CommAxis::y, K::all_reduce));  // G_y = 1: no y collectives at all
  // The bound: the return calls at R_max = 4R = 64 rows, 1024 bytes each.
  EXPECT_EQ(expert_all_to_all_bound(in, p4), 16 + 2 * 256 + 2 * 1024);

  // Capacity 1.5: R = R_r = E·mb·3 = 24 rows exactly, 384 bytes a call; nothing varies.
  in.model.capacity_factor = 1.5;
  v = predict_step_volume(in, p4);
  EXPECT_EQ(at(v, CommAxis::expert, K::all_to_all), (Volume{5, 16 + 4 * 384}));
  EXPECT_EQ(at(v, CommAxis::x, K::all_reduce), at(predict_step_volume(in, p1), CommAxis::x, K::all_reduce));
  for (int a = 0; a < kCommAxisCount; ++a)
    for (int k = 0; k < kCollectiveKindCount; ++k)
      EXPECT_FALSE(v.varies(static_cast<CommAxis>(a), static_cast<K>(k)));
  EXPECT_EQ(expert_all_to_all_bound(in, p4), v.at(CommAxis::expert, K::all_to_all).bytes);

  // Two micro-batches per step (micro-batch 1): every per-micro-batch call twice.
  in.batch.micro_batch = 1;
  v = predict_step_volume(in, p4);
  EXPECT_EQ(at(v, CommAxis::expert, K::all_to_all), (Volume{10, 2 * (16 + 4 * 4 * 3 * 4 * 4)}));

  // G_data = E_p: expert_data groups of one, so the experts' buckets are not reduced at all.
  in = moe_input();
  v = predict_step_volume(in, parse_layout("4x2x2x2e4"));
  EXPECT_EQ(at(v, CommAxis::expert_data, K::all_reduce), (Volume{0, 0}));
  EXPECT_EQ(v.at(CommAxis::expert, K::all_to_all).calls, 5);
}

// The experts' buckets go beside the backward like their block's: overlapped for blocks
// L-1..1, not for block 0.
TEST(LayoutMoe, ExpertBucketsOfLaterBlocksAreOverlapped) {
  ChooserInput in = moe_input();
  in.overlap_comm = true;
  in.model.moe_every = 1;  // blocks 0 and 1 are MoE
  const StepVolume v = predict_step_volume(in, parse_layout("4x2x2x2e2"));
  const GradientBuckets b = gradient_buckets(in.model, parse_layout("4x2x2x2e2"));
  int overlapped = 0, exposed = 0;
  for (const CollectiveCalls& c : v.calls)
    if (c.axis == CommAxis::expert_data && c.bytes == b.moe_experts * 4) (c.overlapped ? overlapped : exposed) += 1;
  EXPECT_EQ(overlapped, 1);
  EXPECT_EQ(exposed, 1);
  EXPECT_EQ(v.at(CommAxis::expert_data, K::all_reduce).calls, 3);  // two blocks' experts, small.experts
}

// At P = 1 with the optimizer sharded the new buckets are padded and split over data like
// the others; at P > 1 the optimizer is never sharded.
TEST(LayoutMoe, OptimizerShardingOnlyWithoutExpertParallelism) {
  ChooserInput in = moe_input();
  const Layout p1 = parse_layout("4x2x2x2"), p2 = parse_layout("4x2x2x2e2");
  EXPECT_TRUE(shards_optimizer(p1, true));
  EXPECT_FALSE(shards_optimizer(p2, true));
  // P = 1, G_data = 4: data buckets block 0 (96), block 1's attention (32) and experts (256),
  // wte (16), small (128), small.experts (80): all divide by 4, so the bytes are the
  // all-reduce's, in reduce-scatters and all-gathers of 6 buckets.
  const StepVolume sharded = predict_step_volume(in, p1, {Recompute::none, true});
  const GradientBuckets b = gradient_buckets(in.model, p1);
  const int64_t all = b.block + b.moe_attention + b.moe_experts + b.wte + b.small + b.small_experts;
  EXPECT_EQ(at(sharded, CommAxis::data, K::reduce_scatter), (Volume{6, all * 4}));
  EXPECT_EQ(at(sharded, CommAxis::data, K::all_gather), (Volume{6, all * 4}));
  EXPECT_EQ(sharded_count(in.model, p1, true).stored, parameters_per_rank(in.model, p1).total());
  // P = 2: the same volume and memory as unsharded.
  const StepVolume two = predict_step_volume(in, p2, {Recompute::none, true});
  EXPECT_EQ(at(two, CommAxis::data, K::reduce_scatter), (Volume{0, 0}));
  EXPECT_EQ(two.bytes(CommAxis::data), predict_step_volume(in, p2, {Recompute::none, false}).bytes(CommAxis::data));
  EXPECT_EQ(estimate_memory(in, p2, {Recompute::none, true}).total(),
            estimate_memory(in, p2, {Recompute::none, false}).total());

  // "auto" never shards at P > 1, and says why.
  EXPECT_FALSE(resolved_modes(in, p2).shard_optimizer);
  EXPECT_NE(shard_reason(in, p2).find("expert parallelism e2"), std::string::npos) << shard_reason(in, p2);
  EXPECT_TRUE(sharding_problem(in, p2).empty());
  // Forced on: an error naming both settings and the fixes, before any prediction at its modes.
  in.shard_optimizer = true;
  const std::string why = sharding_problem(in, p2);
  for (const char* part : {"training.shard_optimizer = true", "e2", "false", "auto", "E_p = 1"})
    EXPECT_NE(why.find(part), std::string::npos) << part << " in: " << why;
  EXPECT_THROW(resolved_modes(in, p2), LayoutError);
  EXPECT_EQ(rejection_reason(in, p2), why);
  EXPECT_FALSE(layout_runs(in, p2));
  EXPECT_TRUE(sharding_problem(in, p1).empty());
  EXPECT_TRUE(resolved_modes(in, p1).shard_optimizer);
}

// P = 1: the same buffers as without expert parallelism. P = 2 dropless (R = 16, R_max = 32,
// c = 4, h = 16, float32): the send side's 2·[R, c] kept and 2·[R, c] scratch, the expert
// side's buffers at R_max; half the experts' gathered weights.
TEST(LayoutMoe, MemoryHoldsBothSidesOfTheExchange) {
  const ChooserInput in = moe_input();
  const Layout p1 = parse_layout("4x2x2x2"), p2 = parse_layout("4x2x2x2e2");
  const MemoryEstimate one = estimate_memory(in, p1, Recompute::none), two = estimate_memory(in, p2, Recompute::none);
  // Kept: P = 1 (2·16·4 + 2·16·16)·4 = 2560; P = 2 (2·16·4 + 2·32·4 + 2·32·16)·4 = 5632.
  EXPECT_EQ(two.activations - one.activations, 5632 - 2560);
  // Scratch: P = 1 (2·16·4 + 16·16)·4 = 1536; P = 2 (2·16·4 + 2·32·4 + 32·16)·4 = 3584, and
  // for the exchange split over G_y = 2 the packed share, the received shares in two copies
  // and the gathered ones, (3·32 + G_y·P)·4·4 = 1600.
  EXPECT_EQ(two.workspace - one.workspace, 3584 + 1600 - 1536);
  // G_z = 2: each local expert's fc and proj gathered, 2·E_l·c·h·4: 2048 at P = 1, 1024 at P = 2.
  EXPECT_EQ(one.gathered_weights - two.gathered_weights, 1024);
}

// The chooser tries every E_p dividing both E and G_data for an MoE model, and none above 1
// for a dense one or with the optimizer forced sharded.
TEST(LayoutMoe, ChooserListsExpertParallelLayouts) {
  ChooserInput in = moe_input();
  in.machine.tasks_per_node = 8;
  EXPECT_EQ(expert_parallelisms(in, 8), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(expert_parallelisms(in, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(expert_parallelisms(in, 1), (std::vector<int>{1}));
  const ChooserResult moe = choose_layout(in);
  std::set<std::string> listed;
  for (const Candidate& c : moe.ranked) listed.insert(format_layout(c.layout));
  for (const char* text : {"8x1x1x1", "8x1x1x1e2", "8x1x1x1e4", "4x2x1x1e4", "2x2x2x1e2", "2x1x1x4e2"})
    EXPECT_EQ(listed.count(text), 1u) << text;
  EXPECT_EQ(listed.count("2x1x1x4e4"), 0u);  // E_p must divide G_data
  for (const Candidate& c : moe.ranked)
    EXPECT_EQ(c.volume.group_size[static_cast<size_t>(CommAxis::expert)], c.layout.experts);
  // The table shows the expert axes' columns when a listed layout has them.
  const std::string table = format_ranked_table(moe, static_cast<int>(moe.ranked.size()));
  EXPECT_NE(table.find("expert ms/MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("expert_data ms/MiB"), std::string::npos);
  EXPECT_NE(table.find("8x1x1x1e4"), std::string::npos);

  ChooserInput dense = in;
  dense.model.experts = 0;
  EXPECT_EQ(expert_parallelisms(dense, 8), (std::vector<int>{1}));
  for (const Candidate& c : choose_layout(dense).ranked) EXPECT_EQ(c.layout.experts, 1) << format_layout(c.layout);

  ChooserInput forced = in;
  forced.shard_optimizer = true;
  EXPECT_EQ(expert_parallelisms(forced, 8), (std::vector<int>{1}));
  for (const Candidate& c : choose_layout(forced).ranked) EXPECT_EQ(c.layout.experts, 1) << format_layout(c.layout);
}

// choose_layout is choose_among over enumerate_layouts(input), rejections included: a size
// tuple that fails for the model's dimensions or the policy is listed once (at E_p = 1), one
// that fails for memory once per E_p.
TEST(LayoutMoe, ChooseAmongTheEnumerationIsChooseLayout) {
  ChooserInput in = moe_input();
  in.machine.tasks_per_node = 8;
  in.policy.max_tensor_parallel = 2;  // rejects e.g. 2x2x2x1 (E_p 1 and 2) once
  // Memory that 8x1x1x1 fits (at its least, block recomputation and the optimizer sharded)
  // and 8x1x1x1e4 does not: in this tiny model the expert side's buffers for R_max = 4R rows
  // outweigh the experts it no longer holds.
  const Layout e1 = parse_layout("8x1x1x1"), e4 = parse_layout("8x1x1x1e4");
  const double need1 = static_cast<double>(estimate_memory(in, e1, {Recompute::block, true}).total());
  const double need4 = static_cast<double>(estimate_memory(in, e4, {Recompute::block, false}).total());
  ASSERT_LT(need1, need4);
  in.machine.memory_headroom = 0;
  in.machine.memory_bytes = (need1 + need4) / 2;
  const ChooserResult forward = choose_layout(in);
  std::vector<Layout> reversed = enumerate_layouts(in);
  std::reverse(reversed.begin(), reversed.end());
  const ChooserResult other = choose_among(in, reversed);
  ASSERT_EQ(other.ranked.size(), forward.ranked.size());
  for (size_t i = 0; i < forward.ranked.size(); ++i) EXPECT_EQ(other.ranked[i].layout, forward.ranked[i].layout);
  ASSERT_EQ(other.rejected.size(), forward.rejected.size());
  for (size_t i = 0; i < forward.rejected.size(); ++i) {
    EXPECT_EQ(other.rejected[i].layout, forward.rejected[i].layout) << i;
    EXPECT_EQ(other.rejected[i].reason, forward.rejected[i].reason) << i;
  }
  bool e4_rejected = false, tensor_parallel_once = true;
  std::set<std::string> tuples;
  for (const Rejection& r : forward.rejected) {
    e4_rejected |= r.layout == e4 && r.reason.find("does not fit in memory") != std::string::npos;
    if (r.reason.find("max_tensor_parallel") != std::string::npos)
      tensor_parallel_once &= r.layout.experts == 1 && tuples.insert(format_layout(r.layout)).second;
  }
  EXPECT_TRUE(e4_rejected);
  EXPECT_TRUE(tensor_parallel_once);
  EXPECT_EQ(tuples.count("2x2x2x1"), 1u);  // once, though E_p = 2 fits its G_data too
  EXPECT_TRUE(std::any_of(forward.ranked.begin(), forward.ranked.end(),
                          [&](const Candidate& c) { return c.layout == e1; }));
}

// The expert axis is priced like any other: its all-to-alls over the slowest link its
// groups span, (n-1) latencies and (n-1)/n of the bytes.
TEST(LayoutMoe, CostPricesTheExpertAllToAllOverItsGroupsSpan) {
  ChooserInput in = moe_input();
  in.machine.nodes = 2;
  in.machine.tasks_per_node = 4;
  in.machine.intra_node = {100e9, 2e-6};
  in.machine.inter_node = {10e9, 20e-6};
  // 8x1x1x1e2, x fastest: an expert group is 2 consecutive ranks (inside a node), an
  // expert_data group 4 ranks 2 apart (across both nodes).
  const Layout l = parse_layout("8x1x1x1e2");
  EXPECT_EQ(axis_link(in.machine, l, CommAxis::expert), LinkTier::intra_node);
  EXPECT_EQ(axis_link(in.machine, l, CommAxis::expert_data), LinkTier::inter_node);
  const StepVolume v = predict_step_volume(in, l);
  const CostEstimate c = estimate_cost(in, l, v);
  double expected = 0;
  for (const CollectiveCalls& calls : v.calls)
    if (calls.axis == CommAxis::expert)
      expected += static_cast<double>(calls.calls) * (1 * 2e-6 + 0.5 * static_cast<double>(calls.bytes) / 100e9);
  EXPECT_GT(expected, 0);
  EXPECT_DOUBLE_EQ(c.comm_s[static_cast<size_t>(CommAxis::expert)], expected);
  EXPECT_GT(c.comm_s[static_cast<size_t>(CommAxis::expert_data)], 0);
  // The FLOPs do not depend on E_p.
  EXPECT_DOUBLE_EQ(flops_per_rank(in, l), flops_per_rank(in, parse_layout("8x1x1x1")));
  // An expert group across the nodes: at 2x4x1x1e2 its 2 ranks are 4 apart.
  EXPECT_EQ(axis_link(in.machine, parse_layout("2x4x1x1e2"), CommAxis::expert), LinkTier::inter_node);
}

// axis_link's rule for the expert axes against listing every group, at every layout the
// chooser tries for an MoE model.
TEST(LayoutMoe, ExpertAxisLinksMatchListingEveryGroup) {
  ChooserInput in = moe_input();
  in.model.experts = 12;
  for (int world : {4, 8, 12, 24}) {
    for (int per_node : {1, 2, 3, 4, 8}) {
      in.machine.tasks_per_node = per_node;
      in.machine.nodes = (world + per_node - 1) / per_node;
      if (in.machine.nodes * per_node != world) continue;
      for (const Layout& l : enumerate_layouts(in)) {
        for (CommAxis a : {CommAxis::expert, CommAxis::expert_data}) {
          bool crosses = false;
          for (int r = 0; r < world; ++r)
            for (int member : l.comm_group(a, r)) crosses |= member / per_node != r / per_node;
          const LinkTier tier = axis_link(in.machine, l, a);
          if (l.comm_size(a) == 1)
            EXPECT_EQ(tier, LinkTier::none);
          else
            EXPECT_EQ(tier, crosses ? LinkTier::inter_node : LinkTier::intra_node)
                << format_layout_with_order(l) << " " << comm_axis_name(a) << " per node " << per_node;
        }
      }
    }
  }
}

}  // namespace
}  // namespace axonn
