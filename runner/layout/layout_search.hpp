#pragma once
// The chooser: enumerate every (G_data, G_x, G_y, G_z) with product = world and every
// axis order, drop what does not divide the model, break site policy or fit in memory,
// price the rest, rank. Deterministic: the same input gives the same ranking, whatever
// the enumeration order.
#include <string>
#include <vector>

#include "layout/layout.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_memory.hpp"
#include "layout/layout_volume.hpp"

namespace axonn {

// Every ordered 4-factorization of world x all 24 axis orders (world's count: the number of
// ordered factorizations times 24).
std::vector<Layout> enumerate_layouts(int world);

struct Candidate {
  Layout layout;
  StepVolume volume;
  MemoryEstimate memory;
  CostEstimate cost;
  std::string why_lost;  // empty for the best; else the main reason it is slower
};

struct Rejection {
  Layout layout;
  std::string reason;  // "hidden=64 is not divisible by G_x*G_z=3", "needs 90 GiB, has 72 GiB", ...
};

struct ChooserResult {
  ChooserInput input;
  std::vector<Candidate> ranked;  // best first; orders with the same link tiers kept once
  std::vector<Rejection> rejected;
  bool fits() const { return !ranked.empty(); }
  const Candidate& best() const { return ranked.front(); }
};

// Why the site policy (allowed axis sizes, max tensor-parallel size) forbids `layout`; empty
// when it allows it. Needs no model.
std::string policy_problem(const Policy& policy, const Layout& layout);

// Why `layout` cannot run this job ("" when it can): divisibility, policy, then memory.
std::string rejection_reason(const ChooserInput& input, const Layout& layout);

// Full evaluation of one layout (throws LayoutError if it cannot run the job).
Candidate evaluate_layout(const ChooserInput& input, const Layout& layout);

ChooserResult choose_layout(const ChooserInput& input);

// The chooser over the given candidates only (any order, repeats allowed; a layout of another
// world size is rejected with its product named). The result depends on the set of candidates,
// not on their order: choose_layout(input) is choose_among(input, enumerate_layouts(world)).
ChooserResult choose_among(const ChooserInput& input, const std::vector<Layout>& candidates);

// When nothing fits: the smallest change that would make a layout fit, found by search
// over micro_batch (down to 1) and node count (up to 64x): e.g.
// "needs >= 16 GPUs (2 nodes of 8) or micro_batch <= 2". Empty if a layout fits now.
std::string smallest_fitting_change(const ChooserInput& input);

}  // namespace axonn
