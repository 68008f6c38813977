#pragma once
// The chooser: enumerate every (G_data, G_x, G_y, G_z) with product = world and every
// axis order, drop what does not divide the model, break site policy or fit in memory,
// price the rest, rank. Deterministic: the same input gives the same ranking, whatever
// the enumeration order. The sizes come from world's divisors and a size tuple is checked
// before its 24 orders are priced, so the work grows with the number of factorizations
// (at most 125,440 size tuples below 10^6, at 997920), not with world. An MoE job's size
// tuples are tried at each expert parallelism E_p that divides both E and G_data
// (expert_parallelisms), which multiplies the work by at most the divisors of E.
#include <array>
#include <string>
#include <vector>

#include "layout/layout.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_hint.hpp"
#include "layout/layout_memory.hpp"
#include "layout/layout_volume.hpp"

namespace axonn {

// Every (data, x, y, z) with product world, data then x then y ascending.
std::vector<std::array<int, 4>> size_tuples(int world);

// Every ordered 4-factorization of world x all 24 axis orders (world's count: the number of
// ordered factorizations times 24), each without expert parallelism (E_p = 1).
std::vector<Layout> enumerate_layouts(int world);

// The expert parallelisms E_p the chooser tries for this job at G_data = data, ascending: for
// an MoE model every E_p that divides both E and G_data (1 included); for a dense model, or
// when the job forces training.shard_optimizer = true (which E_p > 1 cannot run,
// sharding_problem), 1 alone.
std::vector<int> expert_parallelisms(const ChooserInput& input, int data);

// The token exchanges the chooser prices at `layout`'s sizes and E_p: hierarchical, and flat
// too where they differ (an MoE model with E_p > 1 whose y group splits the exchange,
// MoeShape::y_shares > 1).
std::vector<TokenExchange> token_exchanges(const ChooserInput& input, const Layout& layout);

// The layouts the chooser considers for this job: enumerate_layouts(world) with each size
// tuple at every one of its expert_parallelisms and, for each, its token_exchanges.
std::vector<Layout> enumerate_layouts(const ChooserInput& input);

struct Candidate {
  Layout layout;
  Recompute recompute = Recompute::none;  // resolved_modes: the job's mode, or auto's pick
  bool shard_optimizer = false;           // resolved_modes: the optimizer state sharded over data
  int moe_chunks = 1;                     // resolved_moe_chunks: model.moe_chunks, or auto's pick
  int tp_chunks = 1;                      // resolved_tp_chunks: training.tp_chunks, or auto's pick
  StepVolume volume;
  MemoryEstimate memory;
  CostEstimate cost;
  std::string why_lost;  // empty for the best; else the main reason it is slower
};

struct Rejection {
  Layout layout;
  std::string reason;  // "hidden=64 is not divisible by G_x*G_z=3", "needs 90 GiB, has 72 GiB", ...
  // What orders the rejected list: the check that failed (the divisibility checks in
  // divisibility_problem's order, then site policy, then memory) and its number (the axes'
  // product, the axis size or the bytes needed), so "G_x*G_z=16" comes before "=128".
  int check = 0;
  double amount = 0;
};

struct ChooserResult {
  ChooserInput input;
  std::vector<Candidate> ranked;  // best first; orders with the same link tiers kept once
  std::vector<Rejection> rejected;  // by check, then amount, then sizes (data, x, y, z)
  bool fits() const { return !ranked.empty(); }
  const Candidate& best() const { return ranked.front(); }
};

// Why the site policy (allowed axis sizes, max tensor-parallel size) forbids `layout`; empty
// when it allows it. Needs no model.
std::string policy_problem(const Policy& policy, const Layout& layout);

// Why `layout` cannot run this job ("" when it can): divisibility (expert parallelism
// included), policy, the job's forced memory modes (sharding_problem), then memory (at the
// job's modes; for "auto" at the least memory: recompute block, the optimizer sharded where
// it can be).
std::string rejection_reason(const ChooserInput& input, const Layout& layout);

// rejection_reason(input, layout).empty(), without building the message.
bool layout_runs(const ChooserInput& input, const Layout& layout);

// model.moe_chunks at `layout` and `modes`: the job's count, or for "auto" the fewest rounds
// among 1, 2, 4, ... and MoeShape::max_rounds (E_l where the all-to-all can be pipelined)
// whose predicted step is the shortest (1 where no rounds apply).
int resolved_moe_chunks(const ChooserInput& input, const Layout& layout, MemoryModes modes);

// What model.moe_chunks became at `layout`, one line for the trainer's log and `axonn layout
// --explain`; empty for a dense model or moe_chunks = 1. "model.moe_chunks = 4: the expert
// all-to-all runs in 4 pipelined rounds of local experts", "model.moe_chunks = auto: 2
// pipelined rounds of local experts, the shortest predicted step (1: 0.4476 s, 2: 0.4401 s,
// 4: 0.4420 s)", "model.moe_chunks = 2: one exchange, as there is no expert parallelism (E_p = 1)".
std::string moe_chunks_reason(const ChooserInput& input, const Layout& layout, MemoryModes modes);

// training.tp_chunks at `layout` and `modes` (model.moe_chunks decided): the job's count, or
// for "auto" the fewest chunks among 1, 2, 4, ... up to BatchShape::kMaxTpChunks that split
// the micro-batch's rows whose predicted step is the shortest (1 where the layout sums nothing
// over x or y).
int resolved_tp_chunks(const ChooserInput& input, const Layout& layout, MemoryModes modes);

// What training.tp_chunks became at `layout`, one line for the trainer's log and `axonn
// layout --explain`; empty for tp_chunks = 1. "training.tp_chunks = auto: 2 chunk(s), the
// shortest predicted step (1: 0.4476 s, 2: 0.4401 s, 4: 0.4420 s)".
std::string tp_chunks_reason(const ChooserInput& input, const Layout& layout, MemoryModes modes);

// Full evaluation of one layout at its modes (resolved_modes) and MoE rounds
// (resolved_moe_chunks); throws LayoutError if it does not divide the job.
Candidate evaluate_layout(const ChooserInput& input, const Layout& layout);

ChooserResult choose_layout(const ChooserInput& input);

// The chooser over the given candidates only (any order, repeats allowed; a layout of another
// world size is rejected with its product named). The result depends on the set of candidates,
// not on their order: choose_layout(input) is choose_among(input, enumerate_layouts(input)).
// A size tuple rejected for what does not depend on E_p (the model's dimensions, site policy)
// is listed once, at its smallest E_p; a rejection that does (the experts' divisibility,
// forced sharding, memory) once per E_p.
ChooserResult choose_among(const ChooserInput& input, const std::vector<Layout>& candidates);

}  // namespace axonn
