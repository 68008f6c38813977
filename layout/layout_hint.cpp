#include "layout/layout_hint.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <vector>

#include "layout/divisors.hpp"
#include "layout/layout_search.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// Calls visit(layout) for every (data, x, y, z) that divides the job (divisibility_problem's
// checks) with a product of at most max_world, built from divisors rather than searched for:
// z | gcd(C, B); y | gcd(H, V, C/z), so y*z divides C and 4C; x | C/z; data | B/z. Returns
// false when it stopped after `budget` splits.
template <class Visit>
bool for_each_dividing_split(const ChooserInput& in, int64_t max_world, int64_t budget, Visit&& visit) {
  const int64_t C = in.model.hidden, B = in.batch.global_batch;
  const int64_t heads_and_vocab = std::gcd(int64_t{in.model.heads}, int64_t{in.model.vocab});
  for (int64_t z : divisors(std::gcd(C, B))) {
    const std::vector<int64_t> xs = divisors(C / z), ds = divisors(B / z);
    for (int64_t y : divisors(std::gcd(heads_and_vocab, C / z))) {
      for (int64_t x : xs) {
        const int64_t tensor = x * y * z;
        if (tensor > max_world) break;
        for (int64_t d : ds) {
          if (tensor * d > max_world) break;
          if (budget-- <= 0) return false;
          visit(Layout{static_cast<int>(d), static_cast<int>(x), static_cast<int>(y), static_cast<int>(z)});
        }
      }
    }
  }
  return true;
}

// Whether `l`'s sizes run the job at one of the expert parallelisms the chooser tries.
bool runs(const ChooserInput& input, Layout l) {
  for (int experts : expert_parallelisms(input, l.data)) {
    l.experts = experts;
    if (layout_runs(input, l)) return true;
  }
  return false;
}

// Where a layout runs near the job's rank count: the largest count below it and the smallest
// above it, in whole nodes of the same size, or (on_one_node) in any count of ranks on one node.
struct Nearest {
  std::optional<int> below, above;
  bool complete = true;  // false: the split budget ran out first
};

Nearest nearest_running_counts(const ChooserInput& input, bool on_one_node) {
  const int world = input.world(), per_node = input.machine.tasks_per_node;
  ChooserInput at = input;
  Nearest n;
  n.complete = for_each_dividing_split(input, kMaxWorld, kHintSplitBudget, [&](const Layout& l) {
    const int w = l.world();
    if (w == world || (!on_one_node && w % per_node != 0)) return;
    std::optional<int>& side = w < world ? n.below : n.above;
    if (side && (w < world ? *side >= w : *side <= w)) return;  // not nearer
    if (on_one_node)
      at.machine.tasks_per_node = w;
    else
      at.machine.nodes = w / per_node;
    if (runs(at, l)) side = w;
  });
  return n;
}

std::string gpus(int count, int per_node) {
  return std::to_string(count) + " GPUs (" + std::to_string(count / per_node) + " nodes of " +
         std::to_string(per_node) + ")";
}

std::string searched(const Nearest& n) {
  return n.complete ? "" : " (stopped after the first " + std::to_string(kHintSplitBudget) + " splits of the job)";
}

// "; the nearest GPU counts on which a layout runs: 7680 GPUs (960 nodes of 8) and 8192 ...".
// A job that no split of its rank count divides, on one node (`srun -n 5`, `axonn run -n 5`):
// the nearest counts of ranks on that node instead, since such a step changes its task count,
// not its node count; "; the nearest rank counts on one node on which a layout runs: 4 and 6".
std::string nearest_counts(const ChooserInput& input) {
  const bool on_one_node = input.machine.nodes == 1;
  const Nearest n = nearest_running_counts(input, on_one_node);
  const int per_node = input.machine.tasks_per_node;
  const std::string world = std::to_string(input.world());
  const std::string kind = on_one_node ? "rank count" : "GPU count";
  const std::string where = on_one_node ? " on one node" : "";
  auto count = [&](int c) { return on_one_node ? std::to_string(c) : gpus(c, per_node); };
  if (n.below && n.above)
    return "; the nearest " + kind + "s" + where + " on which a layout runs: " + count(*n.below) + " and " +
           count(*n.above);
  if (n.below)
    return "; the nearest " + kind + where + " on which a layout runs: " + count(*n.below) + ", none above " + world +
           searched(n);
  if (n.above)
    return "; the nearest " + kind + where + " on which a layout runs: " + count(*n.above) + ", none below " + world +
           searched(n);
  if (on_one_node)
    return "; no rank count on one node runs it" + searched(n) +
           ": use a job with more divisors (hidden, heads, vocab, global_batch)";
  return "; no count of whole nodes of " + std::to_string(per_node) + " runs it" + searched(n) +
         ": use a job with more divisors (hidden, heads, vocab, global_batch) or another --gpus-per-node";
}

}  // namespace

std::string smallest_fitting_change(const ChooserInput& input) {
  const int world = input.world(), per_node = input.machine.tasks_per_node;
  // What stops this rank count: divisibility, else the site policy, else memory.
  std::optional<Layout> dividing;
  std::vector<Layout> allowed;
  for (const auto& [d, x, y, z] : size_tuples(world)) {
    const Layout l{d, x, y, z};
    if (first_indivisible(input.model, input.batch, l).check >= 0) continue;
    if (!dividing) dividing = l;
    if (!policy_problem(input.policy, l).empty()) continue;
    if (runs(input, l)) return "";
    allowed.push_back(l);
  }
  if (!dividing) {
    const Layout data_parallel{world, 1, 1, 1};
    return "no data x X x Y x Z split of " + std::to_string(world) + " ranks divides the job (e.g. " +
           format_layout(data_parallel) + ": " + divisibility_problem(input.model, input.batch, data_parallel) + ")" +
           nearest_counts(input);
  }
  if (allowed.empty())
    return "every split of " + std::to_string(world) + " ranks that divides the job breaks the site policy (e.g. " +
           format_layout(*dividing) + ": " + policy_problem(input.policy, *dividing) + ")" + nearest_counts(input);

  // Memory: more nodes, or smaller micro-batches. A rank runs micro-batches of the largest
  // divisor of its share of the batch that is <= micro_batch, always a divisor of global_batch,
  // so those are the only sizes worth trying.
  std::vector<std::string> options;
  const Nearest n = nearest_running_counts(input, false);
  if (n.above) options.push_back("needs >= " + gpus(*n.above, per_node));
  const std::vector<int64_t> sizes = divisors(input.batch.global_batch);
  ChooserInput smaller = input;
  for (auto mb = sizes.rbegin(); mb != sizes.rend(); ++mb) {
    if (*mb >= input.batch.micro_batch) continue;
    smaller.batch.micro_batch = static_cast<int>(*mb);
    if (std::any_of(allowed.begin(), allowed.end(), [&](const Layout& l) { return runs(smaller, l); })) {
      options.push_back("micro_batch <= " + std::to_string(*mb));
      break;
    }
  }
  // A job that names a recompute mode: the least recomputation beyond it with which a layout fits.
  if (input.recompute) {
    ChooserInput recomputing = input;
    for (Recompute mode : kRecomputeModes) {
      if (static_cast<int>(mode) <= static_cast<int>(*input.recompute)) continue;
      recomputing.recompute = mode;
      if (std::any_of(allowed.begin(), allowed.end(), [&](const Layout& l) { return runs(recomputing, l); })) {
        options.push_back(std::string("training.recompute = \"") + recompute_name(mode) + "\"");
        break;
      }
    }
  }
  // A job that turns optimizer sharding off: sharding, if a layout then fits.
  if (input.shard_optimizer && !*input.shard_optimizer) {
    ChooserInput sharding = input;
    sharding.shard_optimizer = true;
    if (std::any_of(allowed.begin(), allowed.end(), [&](const Layout& l) { return runs(sharding, l); }))
      options.push_back("training.shard_optimizer = true");
  }
  if (options.empty())
    return "no layout fits in memory on more nodes of " + std::to_string(per_node) + searched(n) +
           " or at micro_batch 1" + (input.recompute && *input.recompute != Recompute::block ? " or recomputing" : "") +
           (input.shard_optimizer && !*input.shard_optimizer ? " or sharding the optimizer" : "") +
           ": use a smaller model or sequence, a global batch with more divisors, or GPUs with "
           "more memory";
  std::string s = options[0];
  for (size_t i = 1; i < options.size(); ++i) s += " or " + options[i];
  return s;
}

}  // namespace axonn
