// Where the rows of an expert-parallel token exchange land (trainer/model/expert_exchange.hpp),
// and which experts' shards each rank holds under expert parallelism.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <vector>

#include "layout/layout.hpp"
#include "trainer/model/expert_exchange.hpp"
#include "trainer/model/parameters.hpp"

namespace axonn {
namespace {

// E = 4 over P = 2: rank j holds experts 2j, 2j+1. This rank's plan uses 3, 0 rows for
// experts 0, 1 (rank 0's) and 1, 4 for experts 2, 3 (rank 1's); rank 0 receives 3, 0 from
// itself and 2, 5 from rank 1.
TEST(ExpertExchange, DroplessSendsEachRankItsExpertsRowsAndReceivesSourceBySource) {
  const ExpertExchange x = plan_expert_exchange({3, 0, 1, 4}, {3, 0, 2, 5}, 2, 0);
  EXPECT_EQ(x.send_rows, (std::vector<size_t>{3, 5}));
  EXPECT_EQ(x.receive_rows, (std::vector<size_t>{3, 7}));
  EXPECT_EQ(x.received, 10);
  const std::vector<ExpertChunk> want = {{0, 0, 3}, {1, 3, 0}, {0, 3, 2}, {1, 5, 5}};
  EXPECT_EQ(x.chunks, want);
}

// With a capacity every (source, expert) run is a whole segment, used or not, so the sizes do
// not depend on the routing.
TEST(ExpertExchange, CapacitySendsWholeSegmentsWithTheUsedRowsFirst) {
  const ExpertExchange x = plan_expert_exchange({3, 0, 1, 4}, {3, 0, 2, 4}, 2, 4);
  EXPECT_EQ(x.send_rows, (std::vector<size_t>{8, 8}));
  EXPECT_EQ(x.receive_rows, (std::vector<size_t>{8, 8}));
  EXPECT_EQ(x.received, 16);
  const std::vector<ExpertChunk> want = {{0, 0, 3}, {1, 4, 0}, {0, 8, 2}, {1, 12, 4}};
  EXPECT_EQ(x.chunks, want);
  EXPECT_THROW(plan_expert_exchange({5, 0, 0, 0}, {3, 0, 2, 4}, 2, 4), std::invalid_argument);
}

// At E_p = 1 the received buffer is the plan's own: one chunk per expert at the plan's rows.
TEST(ExpertExchange, OneExpertRankKeepsThePlansBuffer) {
  const ExpertExchange dropless = plan_expert_exchange({2, 0, 3}, {2, 0, 3}, 1, 0);
  EXPECT_EQ(dropless.chunks, (std::vector<ExpertChunk>{{0, 0, 2}, {1, 2, 0}, {2, 2, 3}}));
  EXPECT_EQ(dropless.received, 5);
  const ExpertExchange capacity = plan_expert_exchange({2, 0, 3}, {2, 0, 3}, 1, 3);
  EXPECT_EQ(capacity.chunks, (std::vector<ExpertChunk>{{0, 0, 2}, {1, 3, 0}, {2, 6, 3}}));
  EXPECT_EQ(capacity.received, 9);
  EXPECT_THROW(plan_expert_exchange({1, 2, 3}, {1, 2, 3}, 2, 0), std::invalid_argument);
  EXPECT_THROW(plan_expert_exchange({1, 2}, {1, 2, 3}, 1, 0), std::invalid_argument);
}

// E = 6 over P = 2, E_l = 3, in 2 rounds: local experts {0} then {1, 2}. This rank's plan
// uses 1, 2, 3 rows for rank 0's experts and 4, 0, 5 for rank 1's; as rank 0 it receives 6, 7,
// 8 rows for its experts from source 0 (itself) and 1, 0, 2 from source 1. Each round's runs are one run per peer
// of this rank's buffer and one per source of the received buffer, and the rounds tile both.
TEST(ExpertExchange, RoundsSplitEveryPeersRunByLocalExpertAndTileBothBuffers) {
  const ExpertExchange x = plan_expert_exchange({1, 2, 3, 4, 0, 5}, {6, 7, 8, 1, 0, 2}, 2, 0);
  EXPECT_EQ(x.send_runs, (std::vector<int64_t>{1, 2, 3, 4, 0, 5}));
  EXPECT_EQ(x.receive_runs, (std::vector<int64_t>{6, 7, 8, 1, 0, 2}));
  const std::vector<ExchangeRound> rounds = plan_rounds(x, 2);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0].first_expert, 0);
  EXPECT_EQ(rounds[0].end_expert, 1);
  EXPECT_EQ(rounds[0].send_first, (std::vector<int64_t>{0, 6}));
  EXPECT_EQ(rounds[0].send_rows, (std::vector<size_t>{1, 4}));
  EXPECT_EQ(rounds[0].receive_first, (std::vector<int64_t>{0, 21}));
  EXPECT_EQ(rounds[0].receive_rows, (std::vector<size_t>{6, 1}));
  EXPECT_EQ(rounds[1].first_expert, 1);
  EXPECT_EQ(rounds[1].end_expert, 3);
  EXPECT_EQ(rounds[1].send_first, (std::vector<int64_t>{1, 10}));
  EXPECT_EQ(rounds[1].send_rows, (std::vector<size_t>{5, 5}));
  EXPECT_EQ(rounds[1].receive_first, (std::vector<int64_t>{6, 22}));
  EXPECT_EQ(rounds[1].receive_rows, (std::vector<size_t>{15, 2}));
  EXPECT_EQ(rounds[0].sent() + rounds[1].sent(), 15u);
  EXPECT_EQ(rounds[0].received() + rounds[1].received(), static_cast<size_t>(x.received));

  // One round is the whole exchange; more rounds than local experts, or none, are refused.
  const std::vector<ExchangeRound> one = plan_rounds(x, 1);
  EXPECT_EQ(one[0].send_rows, x.send_rows);
  EXPECT_EQ(one[0].receive_rows, x.receive_rows);
  EXPECT_EQ(one[0].send_first, (std::vector<int64_t>{0, 6}));
  EXPECT_THROW(plan_rounds(x, 4), std::invalid_argument);
  EXPECT_THROW(plan_rounds(x, 0), std::invalid_argument);
}

// With a capacity every round carries whole segments: the same rows to and from every peer.
TEST(ExpertExchange, RoundsOfACapacityCarryWholeSegments) {
  const ExpertExchange x = plan_expert_exchange({3, 0, 1, 4}, {3, 0, 2, 4}, 2, 4);
  const std::vector<ExchangeRound> rounds = plan_rounds(x, 2);
  for (const ExchangeRound& r : rounds) {
    EXPECT_EQ(r.send_rows, (std::vector<size_t>{4, 4}));
    EXPECT_EQ(r.receive_rows, (std::vector<size_t>{4, 4}));
  }
  EXPECT_EQ(rounds[1].send_first, (std::vector<int64_t>{4, 12}));
  EXPECT_EQ(rounds[1].receive_first, (std::vector<int64_t>{4, 12}));
}

// Expert rank r = data mod E_p holds experts [r·E/E_p, (r+1)·E/E_p) of every expert tensor,
// the copies of its shard are its expert_data cut, and the shards tile each tensor once per copy.
TEST(ExpertParameters, ExpertRanksHoldTheirExpertsAndTileEveryTensor) {
  ModelShape model{.layers = 2, .hidden = 16, .heads = 4, .vocab = 32, .sequence = 8};
  model.experts = 4;
  model.top_k = 2;
  for (const char* text : {"2x1x1x1e2", "4x1x1x1e4", "4x2x1x1e2", "4x1x2x1e2:yxzd", "2x1x1x2e2"}) {
    const Layout layout = parse_layout(text);
    for (const ParamSpec& spec : gpt_parameters(model)) {
      const bool expert = splits_over(spec, Axis::expert);
      EXPECT_EQ(expert, spec.name.find(".experts.") != std::string::npos) << spec.name;
      std::map<std::vector<int64_t>, int> copies;
      int64_t distinct = 0;
      for (int r = 0; r < layout.world(); ++r) {
        const Coords at = layout.coords(r);
        const Rect rect = shard_rect(spec, layout, at);
        if (expert) {
          EXPECT_EQ(rect.count[0], 4 / layout.experts) << text << " " << spec.name;
          EXPECT_EQ(rect.offset[0], (at.data % layout.experts) * rect.count[0]) << text << " " << spec.name;
        }
        if (copies[rect.offset]++ == 0) distinct += element_count(rect);
      }
      int replicas = 1;
      for (Axis a : replica_axes(spec)) replicas *= layout.size(a);
      EXPECT_EQ(distinct, element_count(spec.shape)) << text << " " << spec.name;
      for (const auto& [offset, n] : copies) EXPECT_EQ(n, replicas) << text << " " << spec.name;
    }
    // The experts' gradients have their own buckets, after the block's and the small tensors'.
    const ParameterLayout pl = parameter_layout(model, layout, layout.coords(0));
    EXPECT_TRUE(ParameterLayout::holds_experts(pl.bucket("h.1.experts")));
    EXPECT_FALSE(ParameterLayout::holds_experts(pl.bucket("h.1")));
    EXPECT_EQ(pl.buckets.back().name, "small.experts");
    EXPECT_EQ(pl.bucket("small.experts").offset, pl.small_bucket().offset + pl.small_bucket().count);
  }
}

}  // namespace
}  // namespace axonn
