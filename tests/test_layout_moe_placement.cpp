// Where an MoE job's token exchange runs (docs/moe.md, "The hierarchical exchange"): the flat
// and hierarchical exchanges' bytes per axis and per link tier, the chooser's choice between
// them and of the expert groups' placement, and what `axonn layout --explain` says about it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

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

// tiny_moe_input with H = 4 (for G_y = 4) on 2 nodes of 4 ranks.
ChooserInput tiny_moe() { return test::tiny_moe_input(4, 2, 4); }

int64_t inter_node_all_to_all(const ChooserInput& in, const Layout& l, const StepVolume& v) {
  return bytes_per_tier(in.machine, l, bytes_per_axis(v, K::all_to_all))[static_cast<size_t>(LinkTier::inter_node)];
}

TEST(LayoutMoePlacement, TheFlatExchangeIsWrittenWithAnF) {
  const Layout flat = parse_layout("2x1x4x1e2f");
  EXPECT_EQ(flat.exchange, TokenExchange::flat);
  EXPECT_EQ(flat.experts, 2);
  EXPECT_EQ(format_layout(flat), "2x1x4x1e2f");
  EXPECT_EQ(format_layout_with_order(parse_layout("2x1x4x1e2f:yxzd")), "2x1x4x1e2f:yxzd");
  EXPECT_EQ(parse_layout("2x1x4x1e2").exchange, TokenExchange::hierarchical);
  EXPECT_NE(parse_layout("2x1x4x1e2"), flat);
  // Nothing to flatten without an exchange, or without a y group to split it.
  for (const char* text : {"2x1x4x1e1f", "2x1x4x1f", "2x4x1x1e2f"}) {
    try {
      parse_layout(text);
      ADD_FAILURE() << text << " should be refused";
    } catch (const LayoutError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_layout("2x1x4x1e2ff"), LayoutError);
}

// 4x2x2x2e2 (dropless, m = 8, R = 16 rows, c = 4): flat, each y rank sends all of its rows,
// R·c·4 = 256 bytes per exchange, and nothing goes over y; hierarchical, half of them and the
// y group all-gathers (test_layout_moe.cpp, VolumeAtTwoExpertRanksDropless).
TEST(LayoutMoePlacement, TheFlatExchangeSendsEveryRowOverTheExpertAxis) {
  const ChooserInput in = tiny_moe();
  const Layout hierarchical = parse_layout("4x2x2x2e2"), flat = parse_layout("4x2x2x2e2f");
  const StepVolume h = predict_step_volume(in, hierarchical), f = predict_step_volume(in, flat);
  EXPECT_EQ(h.at(CommAxis::expert, K::all_to_all).bytes, 16 + 4 * 128);
  EXPECT_EQ(f.at(CommAxis::expert, K::all_to_all).bytes, 16 + 4 * 256);
  EXPECT_EQ(f.at(CommAxis::expert, K::all_to_all).calls, 5);
  EXPECT_EQ(h.at(CommAxis::y, K::all_to_all).calls, 4);
  EXPECT_EQ(f.at(CommAxis::y, K::all_to_all).calls, 0);
  EXPECT_FALSE(f.varies(CommAxis::y, K::all_to_all));
  EXPECT_TRUE(f.varies(CommAxis::expert, K::all_to_all));  // dropless rows
  // Everything else is the same exchange's.
  for (CommAxis a : {CommAxis::x, CommAxis::z, CommAxis::data, CommAxis::expert_data})
    EXPECT_EQ(h.bytes(a), f.bytes(a)) << comm_axis_name(a);
  // The flat exchange needs no buffers for the shares.
  EXPECT_LT(estimate_memory(in, flat).total(), estimate_memory(in, hierarchical).total());
  EXPECT_EQ(moe_shape(in.model, batch_split(in.model, in.batch, flat), flat).y_shares, 1);
}

// 8 ranks on 2 nodes of 4, x fastest: at 2x1x4x1 a y group is one node and an expert group
// (ranks r and r + 4) spans both. The hierarchical exchange sends 1/G_y = 1/4 of the rows
// between the nodes; the rest moves inside them.
TEST(LayoutMoePlacement, TheHierarchicalExchangeSendsAQuarterOfTheRowsBetweenNodes) {
  ChooserInput in = tiny_moe();
  in.model.capacity_factor = 1.0;  // cap = 2 slots: R = E·mb·cap = 16, the counts 16 bytes
  const Layout hierarchical = parse_layout("2x1x4x1e2"), flat = parse_layout("2x1x4x1e2f");
  EXPECT_EQ(axis_link(in.machine, hierarchical, CommAxis::expert), LinkTier::inter_node);
  EXPECT_EQ(axis_link(in.machine, hierarchical, CommAxis::y), LinkTier::intra_node);
  const StepVolume h = predict_step_volume(in, hierarchical), f = predict_step_volume(in, flat);
  const int64_t counts = h.at(CommAxis::expert, K::all_to_all).calls / 5 * 16;  // one count exchange per 5 calls
  ASSERT_GT(counts, 0);
  const int64_t h_inter = inter_node_all_to_all(in, hierarchical, h), f_inter = inter_node_all_to_all(in, flat, f);
  EXPECT_EQ(4 * (h_inter - counts), f_inter - counts);
  // The hierarchical exchange's y all-gathers are intra-node.
  const TierBytes h_tiers = bytes_per_tier(in.machine, hierarchical, bytes_per_axis(h, K::all_to_all));
  EXPECT_EQ(h_tiers[static_cast<size_t>(LinkTier::intra_node)], h.at(CommAxis::y, K::all_to_all).bytes);
  EXPECT_GT(h_tiers[static_cast<size_t>(LinkTier::intra_node)], 0);
  // Every byte lands on one tier.
  const TierBytes all = bytes_per_tier(in.machine, hierarchical, bytes_per_axis(h));
  int64_t sum = 0;
  for (int64_t b : all) sum += b;
  int64_t total = 0;
  for (int a = 0; a < kCommAxisCount; ++a) total += h.bytes(static_cast<CommAxis>(a));
  EXPECT_EQ(sum, total);
}

// The dispatch that moves fewer rows over the expert axis: all-gathering the group's P·m
// tokens when that is less than the all-to-all's R/S rows. Dropless, R = m·k and k <= 2, so
// never (at P = k = 2 the rows are equal and the all-to-all is kept); with a capacity the
// all-to-all carries every empty slot too, R = E·mb·cap.
TEST(LayoutMoePlacement, TheExpertGroupGathersItsTokensWhenThatMovesFewerRows) {
  ChooserInput in = tiny_moe();  // m = 8 at G_data·G_z = 8 (mb = 2, T = 4), E = 4, top-2
  const auto shape = [&](const char* text) {
    const Layout l = parse_layout(text);
    return moe_shape(in.model, batch_split(in.model, in.batch, l), l);
  };
  EXPECT_FALSE(shape("8x1x1x1e2").gathers);  // dropless: R = 16 = P·m
  EXPECT_FALSE(shape("8x1x1x1e4").gathers);
  in.model.capacity_factor = 1.0;            // cap = 2: R = 4·2·2 = 16 = P·m at P = 2
  EXPECT_FALSE(shape("8x1x1x1e2").gathers);
  in.model.capacity_factor = 1.5;            // cap = 3: R = 24
  EXPECT_TRUE(shape("8x1x1x1e2").gathers);   // 2·8 = 16 < 24
  EXPECT_FALSE(shape("8x1x1x1e4").gathers);  // 4·8 = 32 > 24
  EXPECT_FALSE(shape("4x1x2x1e2").gathers);  // hierarchical: R/S = 12 < P·m = 2·8
  EXPECT_EQ(shape("4x1x2x1e2").y_shares, 2);
  const MoeShape flat = shape("4x1x2x1e2f");  // flat: R = 24 > 16
  EXPECT_TRUE(flat.gathers);
  EXPECT_EQ(flat.y_shares, 1);
  EXPECT_FALSE(shape("8x1x1x1").gathers);  // no expert group

  // Its bytes at 8x1x1x1e2 (c = 8, float32): per micro-batch the routing P·m·2k·4 = 256 and
  // the tokens and the outputs' gradients P·m·c·4 = 512 gathered; the outputs and the inputs'
  // gradients (512) and the gates' gradients (P·m·k·4 = 128) reduce-scattered; no all-to-all.
  const Layout l = parse_layout("8x1x1x1e2");
  const StepVolume v = predict_step_volume(in, l);
  EXPECT_EQ(v.at(CommAxis::expert, K::all_gather).calls, 3);
  EXPECT_EQ(v.at(CommAxis::expert, K::all_gather).bytes, 256 + 2 * 512);
  EXPECT_EQ(v.at(CommAxis::expert, K::reduce_scatter).bytes, 2 * 512 + 128);
  EXPECT_EQ(v.at(CommAxis::expert, K::all_to_all).calls, 0);
  EXPECT_FALSE(v.varies(CommAxis::expert, K::all_gather));
  EXPECT_EQ(expert_all_to_all_bound(in, l), 0);
  // Against the all-to-all it replaces (4 calls of R·c·4 = 768 bytes and the counts): fewer.
  EXPECT_LT(v.bytes(CommAxis::expert), 4 * 768 + 16);
}

// model.moe_chunks pipelines the all-to-all in rounds by local expert where each expert GEMM is
// whole on its rank (MoeShape::rounds): min(moe_chunks, E_l) at E_p > 1 with G_x = G_y = 1.
TEST(LayoutMoePlacement, ChunksPipelineTheAllToAllByLocalExpertWhereEachExpertGemmIsWhole) {
  ChooserInput in = tiny_moe();  // E = 4
  in.model.moe_chunks = 4;
  const auto shape = [&](const char* text) {
    const Layout l = parse_layout(text);
    return moe_shape(in.model, batch_split(in.model, in.batch, l), l);
  };
  EXPECT_EQ(shape("8x1x1x1e2").rounds, 2);   // E_l = 2 rounds at most
  EXPECT_EQ(shape("4x1x1x2e2").rounds, 2);   // a z split leaves each GEMM's sums on its rank
  EXPECT_EQ(shape("8x1x1x1e4").rounds, 1);   // E_l = 1
  EXPECT_EQ(shape("4x2x1x1e2").rounds, 1);   // fc's output is summed over x
  EXPECT_EQ(shape("4x1x2x1e2f").rounds, 1);  // proj's over y
  EXPECT_EQ(shape("8x1x1x1").rounds, 1);     // nothing to exchange
  in.model.capacity_factor = 1.5;
  EXPECT_EQ(shape("8x1x1x1e2").rounds, 1);   // the all-gather dispatch
  in.model.capacity_factor = 0;
  in.model.moe_chunks = 1;
  EXPECT_EQ(shape("8x1x1x1e2").rounds, 1);

  // The same bytes in more calls: per micro-batch the counts (16 bytes), then the rows, the
  // outputs and both gradients, R·c·4 = 512 bytes each, each in two rounds of 256.
  const Layout l = parse_layout("8x1x1x1e2");
  const StepVolume one = predict_step_volume(in, l);
  const int64_t memory = estimate_memory(in, l).total();
  in.model.moe_chunks = 2;
  const StepVolume two = predict_step_volume(in, l);
  EXPECT_EQ(one.at(CommAxis::expert, K::all_to_all).calls, 5);
  EXPECT_EQ(one.at(CommAxis::expert, K::all_to_all).bytes, 16 + 4 * 512);
  EXPECT_EQ(two.at(CommAxis::expert, K::all_to_all).calls, 9);
  EXPECT_EQ(two.at(CommAxis::expert, K::all_to_all).bytes, 16 + 4 * 512);
  // Staged in buffers the exchange has anyway: the same memory.
  EXPECT_EQ(estimate_memory(in, l).total(), memory);

  // Every round but the first toward the experts and the last back runs beside their GEMMs,
  // hidden at the tier's measured overlap, at most the experts' GEMMs but one round's: here,
  // links so slow that the rounds outlast them, half of the MoE block's 50688 FLOPs per
  // micro-batch (2·6·R·c·h = 49152 for the experts, 6·m·c·E = 1536 for the router) at 1 GFLOP/s.
  in.machine.intra_node_measured.overlap = OverlapCurve::flat(1);
  in.machine.gemm_flops = 1e9;
  in.machine.intra_node = {1e3, 1e-3};
  in.model.moe_chunks = 1;
  EXPECT_EQ(estimate_cost(in, l, predict_step_volume(in, l)).hidden_s, 0);
  in.model.moe_chunks = 2;
  const StepVolume slow = predict_step_volume(in, l);
  int overlapped = 0;
  for (const CollectiveCalls& c : slow.calls) overlapped += c.overlapped ? static_cast<int>(c.calls) : 0;
  EXPECT_EQ(overlapped, 4);  // of the 8 rounds' calls: the second out and the first back, twice
  EXPECT_DOUBLE_EQ(estimate_cost(in, l, slow).hidden_s, 50688 / 1e9 / 2);
}

// model.moe_chunks = "auto" takes, per layout, the fewest rounds among 1, 2, 4, ... and E_l
// whose predicted step is the shortest: one exchange where nothing is hidden (every extra
// round only adds its calls' latency), more where the site measured overlap and the links are
// slow enough for the rounds to hide; left undecided, no volume or run is priced.
TEST(LayoutMoePlacement, AutoChunksTakeTheRoundsWithTheShortestPredictedStep) {
  ChooserInput in = tiny_moe();  // E = 4
  in.model.experts = 8;          // E_l = 4 at e2: 1, 2 and 4 rounds tried
  in.model.moe_chunks = ModelShape::kAutoMoeChunks;
  in.machine.intra_node = in.machine.inter_node = {1e10, 1e-5};
  const Layout l = parse_layout("8x1x1x1e2");
  const MemoryModes modes = resolved_modes(in, l);
  EXPECT_EQ(moe_shape(in.model, batch_split(in.model, in.batch, l), l).rounds, 0);  // undecided
  EXPECT_THROW(
      {
        try {
          predict_step_volume(in, l);
        } catch (const LayoutError& e) {
          EXPECT_NE(std::string(e.what()).find("model.moe_chunks = \"auto\" is undecided"), std::string::npos);
          throw;
        }
      },
      LayoutError);
  // The step at each count, priced at a fixed moe_chunks.
  const auto step_at = [&](int chunks) {
    ChooserInput fixed = in;
    fixed.model.moe_chunks = chunks;
    return estimate_cost(fixed, l, predict_step_volume(fixed, l, modes), modes).step_s();
  };
  EXPECT_LT(step_at(1), step_at(2));  // nothing overlaps on the built-in site
  EXPECT_EQ(resolved_moe_chunks(in, l, modes), 1);
  EXPECT_EQ(evaluate_layout(in, l).moe_chunks, 1);

  // Measured overlap, slow links of negligible latency and a slow GEMM: the rounds hide
  // behind the experts' GEMMs, up to all but one round's of them, so more rounds hide more.
  in.machine.intra_node_measured.overlap = in.machine.inter_node_measured.overlap = OverlapCurve::flat(1);
  in.machine.gemm_flops = 1e9;
  in.machine.intra_node = in.machine.inter_node = {1e3, 1e-12};
  const double steps[] = {step_at(1), step_at(2), step_at(4)};
  const int fastest = steps[2] < std::min(steps[0], steps[1]) ? 4 : steps[1] < steps[0] ? 2 : 1;
  EXPECT_GT(fastest, 1);
  EXPECT_EQ(resolved_moe_chunks(in, l, modes), fastest);
  const Candidate c = evaluate_layout(in, l);
  EXPECT_EQ(c.moe_chunks, fastest);
  EXPECT_DOUBLE_EQ(c.cost.step_s(), steps[fastest == 4 ? 2 : fastest - 1]);
  const std::string why = moe_chunks_reason(in, l, modes);
  EXPECT_NE(why.find("model.moe_chunks = auto: " + std::to_string(fastest) + " pipelined rounds of local experts, "
                     "the shortest predicted step (1: "),
            std::string::npos)
      << why;
  // Where no rounds apply (E_l = 1 at e8), auto is one exchange, and the job's count is kept.
  EXPECT_EQ(resolved_moe_chunks(in, parse_layout("8x1x1x1e8"), modes), 1);
  EXPECT_EQ(moe_chunks_reason(in, parse_layout("8x1x1x1e8"), modes),
            "model.moe_chunks = auto: one exchange, as each rank holds one expert (E_l = 1)");
  in.model.moe_chunks = 3;
  EXPECT_EQ(resolved_moe_chunks(in, l, modes), 3);
  EXPECT_EQ(moe_chunks_reason(in, l, modes),
            "model.moe_chunks = 3: the expert all-to-all runs in 3 pipelined rounds of local experts");
}

// A mid-sized MoE model on `nodes` x `per_node` ranks whose step is mostly communication,
// so the placement matters.
ChooserInput mid_moe(int experts, int top_k, int nodes, int per_node) {
  ChooserInput in;
  in.model = {4, 1024, 16, 32000, 512};
  in.model.experts = experts;
  in.model.top_k = top_k;
  in.model.moe_every = 1;
  in.batch = {64, 4, ElementType::bfloat16};
  in.machine.nodes = nodes;
  in.machine.tasks_per_node = per_node;
  in.machine.memory_bytes = 80e9;
  in.machine.peak_flops = 1e15;
  in.machine.intra_node = {150e9, 5e-6};
  in.machine.inter_node = {25e9, 10e-6};
  return in;
}

// The chooser prices both exchanges where they differ and picks by the links: with the y
// group inside a node and the expert group across nodes, hierarchical; with the y group
// across nodes and the expert group inside one, flat. (In a tiny model, whose messages are
// all latency, the flat exchange's fewer calls win either way.)
TEST(LayoutMoePlacement, TheChooserPricesBothExchangesAndPicksByTheLinks) {
  const ChooserInput in = mid_moe(8, 2, 2, 4);
  EXPECT_EQ(token_exchanges(in, parse_layout("2x1x4x1e2")),
            (std::vector<TokenExchange>{TokenExchange::hierarchical, TokenExchange::flat}));
  EXPECT_EQ(token_exchanges(in, parse_layout("2x1x4x1")), std::vector<TokenExchange>{TokenExchange::hierarchical});
  EXPECT_EQ(token_exchanges(in, parse_layout("2x4x1x1e2")), std::vector<TokenExchange>{TokenExchange::hierarchical});
  const auto pick = [&](const char* text) {
    const Layout sizes = parse_layout(text);
    std::vector<Layout> both;
    for (TokenExchange e : {TokenExchange::hierarchical, TokenExchange::flat}) {
      Layout l = sizes;
      l.exchange = e;
      both.push_back(l);
    }
    const ChooserResult r = choose_among(in, both);
    EXPECT_TRUE(r.fits()) << text;
    return r.fits() ? r.best().layout.exchange : TokenExchange::hierarchical;
  };
  EXPECT_EQ(pick("2x1x4x1e2"), TokenExchange::hierarchical);  // y in a node, expert across
  EXPECT_EQ(pick("2x1x4x1e2:dxyz"), TokenExchange::flat);     // expert in a node, y across
  // The whole chooser lists flat layouts among its candidates.
  bool flat_listed = false;
  for (const Candidate& c : choose_layout(in).ranked) flat_listed |= c.layout.exchange == TokenExchange::flat;
  EXPECT_TRUE(flat_listed);
}

// The bytes a candidate's collectives of `kinds` put on the inter-node links as the model
// prices them: per call bus_factor(kind, n)·bytes (nccl-tests' bus bytes).
double inter_node_bus_bytes(const Candidate& c, const std::vector<K>& kinds) {
  double bytes = 0;
  for (const CollectiveCalls& calls : c.volume.calls) {
    const auto a = static_cast<size_t>(calls.axis);
    if (c.cost.link[a] != LinkTier::inter_node || std::find(kinds.begin(), kinds.end(), calls.kind) == kinds.end())
      continue;
    bytes += static_cast<double>(calls.calls) * bus_factor(calls.kind, c.volume.group_size[a]) *
             static_cast<double>(calls.bytes);
  }
  return bytes;
}

// The chooser minimizes step time, so pricing the inter-node all-to-all 10x higher (a measured
// all-to-all fit on that tier, every other collective's price unchanged) never makes the chosen
// layout put more all-to-all bytes on the inter-node links: if it did, the first choice would
// have been cheaper at the higher price too. The same holds for the whole tier 10x slower and
// the bytes of every kind. (Not for the all-to-all's bytes alone under a slower tier: there
// the chooser may trade inter-node gradient all-reduces for all-to-alls, e.g. 8x1x2x1e8f:xzdy
// -> 2x1x2x4e2 for 16 experts on 2 nodes of 8, which moves less in all.)
TEST(LayoutMoePlacement, SlowerInterNodeLinksNeverAddInterNodeBytes) {
  const std::vector<K> every = {K::all_reduce, K::all_gather, K::reduce_scatter, K::all_to_all};
  int a2a_moved = 0, jobs = 0;
  for (const auto& [nodes, per_node] : {std::pair{2, 4}, std::pair{2, 8}, std::pair{4, 4}, std::pair{4, 8}}) {
    for (int experts : {4, 8, 16}) {
      for (int top_k : {1, 2}) {
        const ChooserInput in = mid_moe(experts, top_k, nodes, per_node);
        ChooserInput slow_a2a = in, slow_tier = in;
        Link a2a = in.machine.inter_node;
        a2a.bandwidth_bytes_per_s /= 10;
        slow_a2a.machine.inter_node_measured.kinds[static_cast<size_t>(K::all_to_all)] = a2a;
        slow_tier.machine.inter_node.bandwidth_bytes_per_s /= 10;
        const Candidate base = choose_layout(in).best();
        const Candidate a = choose_layout(slow_a2a).best(), t = choose_layout(slow_tier).best();
        const std::string what = std::to_string(nodes) + "x" + std::to_string(per_node) + " E=" +
                                 std::to_string(experts) + " k=" + std::to_string(top_k) + ": " +
                                 format_layout_with_order(base.layout) + " -> " + format_layout_with_order(a.layout) +
                                 " / " + format_layout_with_order(t.layout);
        const double before = inter_node_bus_bytes(base, {K::all_to_all});
        EXPECT_LE(inter_node_bus_bytes(a, {K::all_to_all}), before * (1 + 1e-12)) << what;
        EXPECT_LE(inter_node_bus_bytes(t, every), inter_node_bus_bytes(base, every) * (1 + 1e-12)) << what;
        a2a_moved += inter_node_bus_bytes(a, {K::all_to_all}) < before;
        ++jobs;
      }
    }
  }
  EXPECT_GT(a2a_moved, 0) << "of " << jobs << " jobs, some should move all-to-all bytes off the dearer links";
}

// Where the token exchange dominates (many tokens, small experts) the chooser keeps the
// expert groups inside a node; memory that only the experts of more ranks than a node has
// can hold puts them across nodes.
TEST(LayoutMoePlacement, ExpertGroupsStayInANodeUnlessMemoryForcesThemOut) {
  for (int experts : {4, 8, 16}) {
    ChooserInput in = mid_moe(experts, 2, 2, 8);
    in.model.hidden = 512;
    in.model.heads = 8;
    in.model.sequence = 2048;
    in.batch.global_batch = 256;
    const Candidate best = choose_layout(in).best();
    ASSERT_GT(best.layout.experts, 1) << format_layout_with_order(best.layout);
    EXPECT_EQ(best.cost.link[static_cast<size_t>(CommAxis::expert)], LinkTier::intra_node)
        << format_layout_with_order(best.layout);
  }
  // 16 big experts with a capacity on 2 nodes of 8, data and expert parallelism only: memory
  // for one expert per rank and not two.
  ChooserInput in = mid_moe(16, 2, 2, 8);
  in.model.hidden = 2048;
  in.model.capacity_factor = 1.25;
  in.policy.max_tensor_parallel = 1;
  const MemoryModes least = {Recompute::block, false};  // E_p > 1 keeps the optimizer whole
  const double need16 = static_cast<double>(estimate_memory(in, parse_layout("16x1x1x1e16"), least).total());
  const double need8 = static_cast<double>(estimate_memory(in, parse_layout("16x1x1x1e8"), least).total());
  const double need1 = static_cast<double>(estimate_memory(in, parse_layout("16x1x1x1"), {Recompute::block, true}).total());
  ASSERT_LT(need16, need8);
  ASSERT_LT(need16, need1);
  in.machine.memory_headroom = 0;
  in.machine.memory_bytes = (need16 + std::min(need8, need1)) / 2;
  const ChooserResult r = choose_layout(in);
  ASSERT_TRUE(r.fits());
  EXPECT_EQ(r.best().layout.experts, 16) << format_layout_with_order(r.best().layout);
  EXPECT_EQ(r.best().cost.link[static_cast<size_t>(CommAxis::expert)], LinkTier::inter_node);
}

TEST(LayoutMoePlacement, ExplainShowsTheAllToAllPerTierAndTheExchange) {
  const ChooserInput in = mid_moe(8, 2, 2, 4);
  const ChooserResult r = choose_among(in, {parse_layout("2x1x4x1e2"), parse_layout("2x1x4x1e2f")});
  ASSERT_EQ(r.best().layout, parse_layout("2x1x4x1e2"));
  std::string text = format_explain(r, 8);
  for (const char* want : {"MoE placement", "inter-node", "token exchange: hierarchical: each of the 4 y ranks",
                           "flat here (2x1x4x1e2f:xyzd)", "no placement without expert parallelism"})
    EXPECT_NE(text.find(want), std::string::npos) << want << " in\n" << text;
  // Here the layout without expert parallelism wins (no all-to-all at all); it says by how much.
  const ChooserResult dense = choose_among(in, {parse_layout("2x1x4x1e2"), parse_layout("2x1x4x1")});
  ASSERT_EQ(dense.best().layout.experts, 1);
  text = format_explain(dense, 8);
  EXPECT_NE(text.find("best with expert parallelism: 2x1x4x1e2:xyzd, "), std::string::npos) << text;
}

}  // namespace
}  // namespace axonn
