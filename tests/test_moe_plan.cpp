// The MoE pieces that need no ranks: the host's routing plan (which row of the experts'
// buffer holds which token, what a capacity drops) and the layout model's MoE terms
// (parameters, buckets and the collectives of an MoE block), each against values computed
// by hand.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "layout/layout.hpp"
#include "layout/layout_volume.hpp"
#include "layout/model_plan.hpp"
#include "trainer/model/parameters.hpp"
#include "trainer/model/routing_plan.hpp"

namespace axonn {
namespace {

// Two sequences of 3 tokens, k = 2, E = 3. Choices per token (first, second):
//   seq 0: t0 (0,1) t1 (0,2) t2 (1,0);  seq 1: t3 (2,0) t4 (2,1) t5 (2,0)
const std::vector<int32_t> kChoices = {0, 1, 0, 2, 1, 0, 2, 0, 2, 1, 2, 0};

TEST(RoutingPlan, DroplessGivesEveryChoiceARowExpertByExpertInTokenOrder) {
  const RoutingPlan p = plan_routing(kChoices, 2, 3, 3, 0);
  EXPECT_EQ(p.rows, 12);
  EXPECT_EQ(p.dropped, 0);
  EXPECT_EQ(p.routed, (std::vector<int64_t>{5, 3, 4}));
  EXPECT_EQ(p.used, p.routed);
  EXPECT_EQ(p.start, (std::vector<int64_t>{0, 5, 8}));
  EXPECT_EQ(p.listed, p.start);
  // Expert 0: t0 t1 t2 t3 t5; expert 1: t0 t2 t4; expert 2: t1 t3 t4 t5.
  EXPECT_EQ(p.token_of_row, (std::vector<int32_t>{0, 1, 2, 3, 5, 0, 2, 4, 1, 3, 4, 5}));
  EXPECT_EQ(p.choice_of_row, (std::vector<int32_t>{0, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 0}));
  // slots[t·k + s] is the row of token t's choice s.
  EXPECT_EQ(p.slots, (std::vector<int32_t>{0, 5, 1, 8, 6, 2, 9, 3, 10, 7, 11, 4}));
}

TEST(RoutingPlan, CapacityKeepsFirstChoicesFirstPerSequenceAndDropsTheRest) {
  // One slot per expert per sequence: seq 0 offers expert 0 t0 and t1 as first choices (t1
  // dropped), expert 1 t2 (first) then t0 (second, dropped), expert 2 t1 (second). seq 1:
  // expert 2 t3 (t4, t5 dropped), expert 0 t3 (second; t5 dropped), expert 1 t4 (second).
  const RoutingPlan p = plan_routing(kChoices, 2, 3, 3, 1);
  EXPECT_EQ(p.rows, 3 * 2 * 1);  // E segments of sequences · capacity rows
  EXPECT_EQ(p.start, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(p.used, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(p.routed, (std::vector<int64_t>{5, 3, 4}));
  EXPECT_EQ(p.dropped, 12 - 6);
  EXPECT_EQ(p.token_of_row, (std::vector<int32_t>{0, 3, 2, 4, 1, 3}));
  EXPECT_EQ(p.slots, (std::vector<int32_t>{0, -1, -1, 4, 2, -1, 5, 1, -1, 3, -1, -1}));
}

TEST(RoutingPlan, TheDroppedSetDependsOnlyOnEachSequence) {
  // The same two sequences planned together or one at a time drop the same choices.
  const RoutingPlan both = plan_routing(kChoices, 2, 3, 3, 1);
  const std::vector<int32_t> first(kChoices.begin(), kChoices.begin() + 6), second(kChoices.begin() + 6, kChoices.end());
  const RoutingPlan a = plan_routing(first, 2, 3, 3, 1), b = plan_routing(second, 2, 3, 3, 1);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(both.slots[i] < 0, a.slots[i] < 0) << i;
    EXPECT_EQ(both.slots[6 + i] < 0, b.slots[i] < 0) << i;
  }
  EXPECT_EQ(both.dropped, a.dropped + b.dropped);
}

TEST(RoutingPlan, RejectsAnExpertOutsideTheRangeAndMismatchedSizes) {
  EXPECT_THROW(plan_routing({0, 3}, 2, 3, 1, 0), std::invalid_argument);
  EXPECT_THROW(plan_routing({0, -1}, 2, 3, 1, 0), std::invalid_argument);
  EXPECT_THROW(plan_routing({0, 1, 2}, 2, 3, 1, 0), std::invalid_argument);
}

ModelShape moe_model() {
  ModelShape m{2, 8, 2, 16, 4};  // L=2, C=8, H=2, V=16, T=4
  m.experts = 4;
  m.top_k = 2;
  m.moe_every = 2;  // block 1 is MoE
  return m;
}

TEST(MoePlan, ParametersAreTheDenseModelsPlusEachExpertAndTheRouter) {
  const ModelShape m = moe_model();
  const Layout l = parse_layout("1x2x1x1");
  ModelShape dense = m;
  dense.experts = 0;
  const ParameterCount p = parameters_per_rank(m, l), d = parameters_per_rank(dense, l);
  // Three more experts' fc and proj: 3·8C²/G_x; their biases 3·(4C + C/G_x); the router C/G_x·E.
  EXPECT_EQ(p.big - d.big, 3 * 8 * 64 / 2);
  EXPECT_EQ(p.small - d.small, 3 * (32 + 4) + 4 * 4);
  // The table the trainer and the checkpoints use says the same.
  int64_t elements = 0;
  for (const ParamSpec& spec : gpt_parameters(m)) elements += element_count(shard_rect(spec, l, Coords{}));
  EXPECT_EQ(elements, p.total());
  EXPECT_EQ(parameters_total(m), parameters_total(dense) + 3 * 8 * 64 + 3 * 40 + 8 * 4);
}

TEST(MoePlan, ExpertRowsAreEveryChoiceOrTheCapacitySegments) {
  ModelShape m = moe_model();
  BatchSplit split;
  split.micro_batch = 3;
  split.tokens = 3 * m.sequence;
  EXPECT_EQ(moe_shape(m, split).rows, 12 * 2);
  m.capacity_factor = 1.0;  // ceil(1.0 · T·k / E) = ceil(4·2/4) = 2 slots per sequence
  EXPECT_EQ(expert_capacity_per_sequence(m), 2);
  EXPECT_EQ(moe_shape(m, split).rows, 4 * 3 * 2);
  m.capacity_factor = 1.1;  // ceil(2.2) = 3
  EXPECT_EQ(expert_capacity_per_sequence(m), 3);
}

TEST(MoePlan, VolumeCountsTheMoeBlocksCollectives) {
  ChooserInput in;
  in.model = moe_model();
  in.batch = {4, 4, ElementType::float32};
  in.machine.tasks_per_node = 8;
  in.overlap_comm = false;
  // x = 2, y = 2, z = 2: b = 4/2 = 2 sequences, mb = 2, A = 1, m = 8 tokens, R = m·k = 16.
  const Layout l = parse_layout("1x2x2x2");
  ChooserInput dense_in = in;
  dense_in.model.experts = 0;
  const StepVolume v = predict_step_volume(in, l), d = predict_step_volume(dense_in, l);
  using K = CollectiveKind;
  const auto delta = [&](CommAxis a, K k) {
    return std::pair{v.at(a, k).calls - d.at(a, k).calls, v.at(a, k).bytes - d.at(a, k).bytes};
  };
  // The dense block's MLP, gone: fc [C/G_x=4, 4C/G_y=16] and proj [16, 4], m·16·4 and m·4·4.
  //   x: fc forward Y (8·16·4 = 512) and proj backward dX (512); y: fc dX (8·4·4 = 128), proj Y (128);
  //   z: 2 gathers and 2 reduce-scatters of 64·4 = 256.
  // The MoE block's: x: logits 8·4·4 = 128, fc out 16·16·4 = 1024 and its gradient, gates' gradient
  // 8·2·4 = 64; y: proj out 16·4·4 = 256 and fc's dX; z: statistics (2E+1)·4 = 36, 2E gathers and
  // reduce-scatters of 256.
  EXPECT_EQ(delta(CommAxis::x, K::all_reduce), (std::pair<int64_t, int64_t>{4 - 2, 128 + 2048 + 64 - 1024}));
  EXPECT_EQ(delta(CommAxis::y, K::all_reduce), (std::pair<int64_t, int64_t>{2 - 2, 512 - 256}));
  EXPECT_EQ(delta(CommAxis::z, K::all_gather), (std::pair<int64_t, int64_t>{8 - 2, (8 - 2) * 256}));
  EXPECT_EQ(delta(CommAxis::z, K::reduce_scatter), (std::pair<int64_t, int64_t>{8 - 2, (8 - 2) * 256}));
  // z all-reduces: the statistics, and the experts' biases' bucket ("small.experts"), one call
  // each; the small tensors' buckets together grow by the MoE block's.
  const int64_t small_growth = parameters_per_rank(in.model, l).small - parameters_per_rank(dense_in.model, l).small;
  EXPECT_EQ(delta(CommAxis::z, K::all_reduce), (std::pair<int64_t, int64_t>{2, 36 + small_growth * 4}));
  EXPECT_EQ(v.at(CommAxis::data, K::all_reduce).calls, 0);  // G_data = 1
}

TEST(MoePlan, DataBucketsOfMoeAndDenseBlocksDiffer) {
  ChooserInput in;
  in.model = moe_model();
  in.batch = {4, 2, ElementType::float32};  // b = 2 = mb: one micro-batch, one statistics all-reduce
  in.machine.tasks_per_node = 8;
  const Layout l = parse_layout("2x1x1x1");
  const GradientBuckets b = gradient_buckets(in.model, l);
  EXPECT_EQ(b.moe_attention + b.moe_experts - b.block, 3 * 8 * 64);  // three more experts' fc and proj
  EXPECT_EQ(b.moe_experts, 4 * 8 * 64);
  const StepVolume v = predict_step_volume(in, l);
  // Block 1's attention and its experts, block 0 (dense), wte, small, small.experts: every
  // gradient once (E_p = 1: the experts' buckets over data too).
  EXPECT_EQ(v.at(CommAxis::data, CollectiveKind::all_reduce).calls, 6 + 1);  // and the statistics' one
  EXPECT_EQ(v.at(CommAxis::data, CollectiveKind::all_reduce).bytes,
            (parameters_per_rank(in.model, l).total() + moe_statistics(in.model)) * 4);
}

}  // namespace
}  // namespace axonn
