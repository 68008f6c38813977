#include "layout/layout_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// All 24 axis orders, the default (x fastest, then y, z, data) first.
std::vector<std::array<Axis, 4>> all_orders() {
  std::array<Axis, 4> o = {Axis::x, Axis::y, Axis::z, Axis::data};
  std::vector<std::array<Axis, 4>> orders;
  do {
    orders.push_back(o);
  } while (std::next_permutation(o.begin(), o.end()));
  return orders;
}

// Axis orders that put every group on the same link tiers price identically (e.g. every
// order on a single node); the chooser keeps one of them, the first by tie-break.
std::string placement_key(const Candidate& c) {
  std::string key = format_layout(c.layout) + ":";
  for (LinkTier tier : c.cost.link) key += static_cast<char>('0' + static_cast<int>(tier));
  return key;
}

int order_index(const Layout& l) {
  static const auto orders = all_orders();
  return static_cast<int>(std::find(orders.begin(), orders.end(), l.order) - orders.begin());
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Strict weak order: faster first; ties to fewer tensor-parallel ranks, then the default
// axis order, then the sizes.
bool ranks_before(const Candidate& a, const Candidate& b) {
  const double ta = a.cost.step_s(), tb = b.cost.step_s();
  if (ta != tb) return ta < tb;
  const auto key = [](const Candidate& c) {
    const Layout& l = c.layout;
    return std::make_tuple(l.tensor_parallel(), order_index(l), l.x, l.y, l.z, l.data);
  };
  return key(a) < key(b);
}

std::string why_slower(const Candidate& c, const Candidate& best) {
  struct Part {
    std::string name;
    double mine, theirs;
  };
  std::vector<Part> parts{{"compute", c.cost.compute_s, best.cost.compute_s}};
  for (int a = 0; a < kCommAxisCount; ++a)
    parts.push_back({comm_axis_name(static_cast<CommAxis>(a)) + " communication", c.cost.comm_s[static_cast<size_t>(a)],
                     best.cost.comm_s[static_cast<size_t>(a)]});
  const auto worst = std::max_element(
      parts.begin(), parts.end(), [](const Part& x, const Part& y) { return x.mine - x.theirs < y.mine - y.theirs; });
  char buf[200];
  const double delta = c.cost.step_s() - best.cost.step_s();
  if (delta <= 0) {
    std::snprintf(buf, sizeof buf,
                  "ties on time; ranked after by tie-break (fewer tensor-parallel ranks, default order)");
  } else {
    std::snprintf(buf, sizeof buf, "%.3f ms slower (+%.1f%%): %s %.3f ms vs %.3f ms", delta * 1e3,
                  100.0 * delta / best.cost.step_s(), worst->name.c_str(), worst->mine * 1e3, worst->theirs * 1e3);
  }
  return buf;
}

// Does any layout of this world run the job? (No pricing: the no-fit search is cheap.)
bool any_fits(const ChooserInput& input) {
  const int world = input.world();
  for (int x = 1; x <= world; ++x)
    for (int y = 1; world % x == 0 && y <= world / x; ++y)
      for (int z = 1; (world / x) % y == 0 && z <= world / x / y; ++z) {
        if ((world / x / y) % z != 0) continue;
        Layout l;
        l.x = x, l.y = y, l.z = z, l.data = world / x / y / z;
        if (rejection_reason(input, l).empty()) return true;
      }
  return false;
}

}  // namespace

std::vector<Layout> enumerate_layouts(int world) {
  std::vector<Layout> out;
  const auto orders = all_orders();
  for (int d = 1; d <= world; ++d) {
    if (world % d) continue;
    for (int x = 1; x <= world / d; ++x) {
      if ((world / d) % x) continue;
      for (int y = 1; y <= world / d / x; ++y) {
        if ((world / d / x) % y) continue;
        const int z = world / d / x / y;
        for (const auto& order : orders) out.push_back(Layout{d, x, y, z, order});
      }
    }
  }
  return out;
}

std::string policy_problem(const Policy& policy, const Layout& l) {
  if (policy.max_tensor_parallel > 0 && l.tensor_parallel() > policy.max_tensor_parallel)
    return "site policy: G_x*G_y*G_z=" + std::to_string(l.tensor_parallel()) +
           " exceeds max_tensor_parallel=" + std::to_string(policy.max_tensor_parallel);
  const auto& ok = policy.allowed_axis_sizes;
  if (ok.empty()) return "";
  for (Axis a : kAllAxes)
    if (std::find(ok.begin(), ok.end(), l.size(a)) == ok.end())
      return "site policy: axis " + axis_name(a) + " size " + std::to_string(l.size(a)) +
             " is not in allowed_axis_sizes";
  return "";
}

std::string rejection_reason(const ChooserInput& input, const Layout& l) {
  if (l.world() != input.world())
    return "product " + std::to_string(l.world()) + " differs from the " + std::to_string(input.world()) + " tasks";
  std::string why = divisibility_problem(input.model, input.batch, l);
  if (!why.empty()) return why;
  why = policy_problem(input.policy, l);
  if (!why.empty()) return why;
  const double need = static_cast<double>(estimate_memory(input, l).total());
  const double have = usable_memory(input.machine);
  if (need > have) return "does not fit in memory: needs " + gib(need) + " per GPU, has " + gib(have);
  return "";
}

Candidate evaluate_layout(const ChooserInput& input, const Layout& l) {
  Candidate c;
  c.layout = l;
  c.volume = predict_step_volume(input, l);
  c.memory = estimate_memory(input, l);
  c.cost = estimate_cost(input, l, c.volume);
  return c;
}

ChooserResult choose_among(const ChooserInput& input, const std::vector<Layout>& candidates) {
  if (input.world() < 1) throw LayoutError("world size " + std::to_string(input.world()) + " must be >= 1");
  ChooserResult result;
  result.input = input;
  // Rejection depends on the sizes only, so each size tuple is checked once. It is recorded
  // once, keyed by (data, x, y, z) and carrying its smallest axis order, so the rejected list
  // is the same whatever order the candidates come in.
  std::map<std::string, std::string> checked;
  std::map<std::array<int, 4>, Rejection> rejected;
  for (const Layout& l : candidates) {
    auto [it, fresh] = checked.try_emplace(format_layout(l));
    if (fresh) it->second = rejection_reason(input, l);
    if (it->second.empty()) {
      result.ranked.push_back(evaluate_layout(input, l));
      continue;
    }
    auto [rej, first] = rejected.try_emplace({l.data, l.x, l.y, l.z}, Rejection{l, it->second});
    if (!first && order_index(l) < order_index(rej->second.layout)) rej->second.layout = l;
  }
  for (auto& [sizes, rejection] : rejected) result.rejected.push_back(std::move(rejection));
  // ranks_before is a total order on distinct layouts, so sorting fixes the ranking and
  // which of several equal placements survives the de-duplication.
  std::sort(result.ranked.begin(), result.ranked.end(), ranks_before);
  std::map<std::string, bool> seen;
  std::erase_if(result.ranked, [&](const Candidate& c) { return !seen.try_emplace(placement_key(c), true).second; });
  for (size_t i = 1; i < result.ranked.size(); ++i)
    result.ranked[i].why_lost = why_slower(result.ranked[i], result.ranked[0]);
  return result;
}

ChooserResult choose_layout(const ChooserInput& input) {
  if (input.world() < 1) throw LayoutError("world size " + std::to_string(input.world()) + " must be >= 1");
  return choose_among(input, enumerate_layouts(input.world()));
}

std::string smallest_fitting_change(const ChooserInput& input) {
  if (any_fits(input)) return "";
  std::vector<std::string> options;
  for (int nodes = input.machine.nodes + 1; nodes <= 64 * input.machine.nodes; ++nodes) {
    ChooserInput bigger = input;
    bigger.machine.nodes = nodes;
    if (any_fits(bigger)) {
      const int gpus = nodes * input.machine.tasks_per_node;
      options.push_back("needs >= " + std::to_string(gpus) + " GPUs (" + std::to_string(nodes) + " nodes of " +
                        std::to_string(input.machine.tasks_per_node) + ")");
      break;
    }
  }
  for (int mb = input.batch.micro_batch - 1; mb >= 1; --mb) {
    ChooserInput smaller = input;
    smaller.batch.micro_batch = mb;
    if (any_fits(smaller)) {
      options.push_back("micro_batch <= " + std::to_string(mb));
      break;
    }
  }
  if (options.empty())
    return "no layout fits even with 64x the nodes or micro_batch 1: use a smaller model or sequence, a global "
           "batch with more divisors, or GPUs with more memory";
  std::string s = options[0];
  for (size_t i = 1; i < options.size(); ++i) s += " or " + options[i];
  return s;
}

}  // namespace axonn
