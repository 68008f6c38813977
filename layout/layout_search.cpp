#include "layout/layout_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

#include "core/number_text.hpp"
#include "layout/divisors.hpp"
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

// `l` at expert parallelism E_p = experts and the token exchange `exchange`.
Layout with_experts(Layout l, int experts, TokenExchange exchange = TokenExchange::hierarchical) {
  l.experts = experts;
  l.exchange = exchange;
  return l;
}

int exchange_index(const Layout& l) { return static_cast<int>(l.exchange); }

int order_index(const Layout& l) {
  static const auto orders = all_orders();
  return static_cast<int>(std::find(orders.begin(), orders.end(), l.order) - orders.begin());
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Strict weak order: faster first; ties to fewer tensor-parallel ranks, then less expert
// parallelism, then the default axis order, then the sizes.
bool ranks_before(const Candidate& a, const Candidate& b) {
  const double ta = a.cost.step_s(), tb = b.cost.step_s();
  if (ta != tb) return ta < tb;
  const auto key = [](const Candidate& c) {
    const Layout& l = c.layout;
    return std::make_tuple(l.tensor_parallel(), l.experts, exchange_index(l), order_index(l), l.x, l.y, l.z, l.data);
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
  std::string why = buf;
  // Recomputation is part of its compute and of its z and x bytes: say when it differs.
  if (c.recompute != best.recompute)
    why += std::string("; recompute ") + recompute_name(c.recompute) + " vs " + recompute_name(best.recompute);
  if (c.shard_optimizer != best.shard_optimizer)
    why += std::string("; optimizer ") + (c.shard_optimizer ? "sharded" : "unsharded") + " vs " +
           (best.shard_optimizer ? "sharded" : "unsharded");
  return why;
}

// The check that `layout` fails for this job, in rejection order, or nullopt when it runs.
// Builds no message (the caller asks for one only for the layouts it reports).
struct Failure {
  int check = 0;
  double amount = 0;
};
constexpr int kWorldCheck = -1;                            // another world size (choose_among)
constexpr int kTensorParallelCheck = kDivisibilityChecks;  // then one per axis, then the modes, then memory
constexpr int kShardingCheck = kTensorParallelCheck + 1 + static_cast<int>(kAllAxes.size());
constexpr int kMemoryCheck = kShardingCheck + 1;

// Whether another E_p of the same sizes could pass the check that failed.
bool depends_on_expert_parallelism(const Failure& f) {
  return f.check == kExpertCheck || f.check == kShardingCheck || f.check == kMemoryCheck;
}

std::optional<Failure> policy_failure(const Policy& policy, const Layout& l) {
  if (policy.max_tensor_parallel > 0 && l.tensor_parallel() > policy.max_tensor_parallel)
    return Failure{kTensorParallelCheck, static_cast<double>(l.tensor_parallel())};
  const auto& ok = policy.allowed_axis_sizes;
  if (ok.empty()) return std::nullopt;
  for (Axis a : kAllAxes)
    if (std::find(ok.begin(), ok.end(), l.size(a)) == ok.end())
      return Failure{kTensorParallelCheck + 1 + static_cast<int>(a), static_cast<double>(l.size(a))};
  return std::nullopt;
}

std::optional<Failure> failure(const ChooserInput& input, const Layout& l) {
  if (l.world() != input.world()) return Failure{kWorldCheck, static_cast<double>(l.world())};
  const Indivisible bad = first_indivisible(input.model, input.batch, l);
  if (bad.check >= 0) return Failure{bad.check, static_cast<double>(bad.ways)};
  if (auto f = policy_failure(input.policy, l)) return f;
  if (!sharding_problem(input, l).empty()) return Failure{kShardingCheck, static_cast<double>(l.experts)};
  const double need = static_cast<double>(estimate_memory(input, l).total());
  if (need > usable_memory(input.machine)) return Failure{kMemoryCheck, need};
  return std::nullopt;
}

Rejection rejection(const ChooserInput& input, const Layout& l, const Failure& f) {
  return Rejection{l, rejection_reason(input, l), f.check, f.amount};
}

bool rejected_before(const Rejection& a, const Rejection& b) {
  const auto key = [](const Rejection& r) {
    const Layout& l = r.layout;
    return std::make_tuple(r.check, r.amount, l.data, l.x, l.y, l.z, l.experts, exchange_index(l));
  };
  return key(a) < key(b);
}

Candidate evaluate_at(const ChooserInput& input, const Layout& l, MemoryModes modes) {
  ChooserInput at = input;
  at.model.moe_chunks = resolved_moe_chunks(input, l, modes);
  at.batch.tp_chunks = resolved_tp_chunks(at, l, modes);
  Candidate c;
  c.layout = l;
  c.recompute = modes.recompute;
  c.shard_optimizer = shards_optimizer(l, modes.shard_optimizer);
  c.moe_chunks = at.model.moe_chunks;
  c.tp_chunks = at.batch.tp_chunks;
  c.volume = predict_step_volume(at, l, modes);
  c.memory = estimate_memory(at, l, modes);
  c.cost = estimate_cost(at, l, c.volume, modes);
  return c;
}

// The predicted step at one count of an "auto" setting (MoE rounds, tensor-parallel chunks).
struct CountPrice {
  int chunks;
  double step_s;
};
// The predicted step at each round count "auto" tries: 1, 2, 4, ... and max_rounds.
std::vector<CountPrice> rounds_prices(const ChooserInput& input, const Layout& l, MemoryModes modes) {
  const MoeShape moe = moe_shape(input.model, batch_split(input.model, input.batch, l), l);
  ChooserInput at = input;
  if (at.batch.tp_chunks_auto()) at.batch.tp_chunks = 1;  // decided after the rounds, at their count
  std::vector<CountPrice> prices;
  for (int64_t n = 1;; n *= 2) {
    at.model.moe_chunks = static_cast<int>(std::min(n, moe.max_rounds));
    prices.push_back({at.model.moe_chunks, estimate_cost(at, l, predict_step_volume(at, l, modes), modes).step_s()});
    if (at.model.moe_chunks >= moe.max_rounds) return prices;
  }
}

// The fewest rounds (or chunks) of the shortest predicted step.
int fewest_fastest(const std::vector<CountPrice>& prices) {
  CountPrice best = prices.front();
  for (const CountPrice& p : prices)
    if (p.step_s < best.step_s) best = p;
  return best.chunks;
}

// Why a layout runs one exchange whatever model.moe_chunks says (MoeShape::max_rounds == 1).
std::string why_one_exchange(const Layout& l, const MoeShape& moe) {
  if (l.experts == 1) return "there is no expert parallelism (E_p = 1)";
  if (moe.gathers) return "the expert group all-gathers its tokens instead of the all-to-all";
  if (l.x > 1 || l.y > 1) return "the experts' GEMMs are split over x or y (rounds need G_x = G_y = 1)";
  return "each rank holds one expert (E_l = 1)";
}

std::string rounds_text(int64_t rounds) {
  if (rounds == 1) return "one exchange";
  std::string s = std::to_string(rounds);
  s += " pipelined rounds of local experts";
  return s;
}

// Sorts, drops equal placements, says why each runner-up lost.
ChooserResult finish(const ChooserInput& input, std::vector<Candidate> ranked, std::vector<Rejection> rejected) {
  ChooserResult result;
  result.input = input;
  result.ranked = std::move(ranked);
  result.rejected = std::move(rejected);
  std::sort(result.rejected.begin(), result.rejected.end(), rejected_before);
  // ranks_before is a total order on distinct layouts, so sorting fixes the ranking and
  // which of several equal placements survives the de-duplication.
  std::sort(result.ranked.begin(), result.ranked.end(), ranks_before);
  std::map<std::string, bool> seen;
  std::erase_if(result.ranked, [&](const Candidate& c) { return !seen.try_emplace(placement_key(c), true).second; });
  for (size_t i = 1; i < result.ranked.size(); ++i)
    result.ranked[i].why_lost = why_slower(result.ranked[i], result.ranked[0]);
  return result;
}

void check_world(const ChooserInput& input) {
  if (input.world() < 1 || input.world() > kMaxWorld)
    throw LayoutError("world size " + std::to_string(input.world()) + " is outside [1, " + std::to_string(kMaxWorld) +
                      "], the rank counts the chooser handles");
}

}  // namespace

std::vector<std::array<int, 4>> size_tuples(int world) {
  std::vector<std::array<int, 4>> out;
  const std::vector<int64_t> divs = divisors(world);
  for (int64_t d : divs) {
    const int64_t after_d = world / d;
    for (int64_t x : divs) {
      if (x > after_d) break;
      if (after_d % x) continue;
      const int64_t after_x = after_d / x;
      for (int64_t y : divs) {
        if (y > after_x) break;
        if (after_x % y) continue;
        out.push_back({static_cast<int>(d), static_cast<int>(x), static_cast<int>(y), static_cast<int>(after_x / y)});
      }
    }
  }
  return out;
}

std::vector<Layout> enumerate_layouts(int world) {
  std::vector<Layout> out;
  const auto orders = all_orders();
  for (const auto& [d, x, y, z] : size_tuples(world))
    for (const auto& order : orders) out.push_back(Layout{d, x, y, z, order});
  return out;
}

std::vector<int> expert_parallelisms(const ChooserInput& input, int data) {
  const bool sharding_forced = input.shard_optimizer && *input.shard_optimizer;
  if (!input.model.moe() || sharding_forced) return {1};
  std::vector<int> out;
  for (int64_t p : divisors(std::gcd(input.model.experts, data))) out.push_back(static_cast<int>(p));
  return out;
}

std::vector<TokenExchange> token_exchanges(const ChooserInput& input, const Layout& l) {
  const std::vector<TokenExchange> hierarchical = {TokenExchange::hierarchical};
  if (!input.model.moe() || l.experts == 1 || l.y == 1 || first_indivisible(input.model, input.batch, l).check >= 0)
    return hierarchical;
  Layout split = l;
  split.exchange = TokenExchange::hierarchical;
  if (moe_shape(input.model, batch_split(input.model, input.batch, split), split).y_shares == 1) return hierarchical;
  return {TokenExchange::hierarchical, TokenExchange::flat};
}

std::vector<Layout> enumerate_layouts(const ChooserInput& input) {
  std::vector<Layout> out;
  const auto orders = all_orders();
  for (const auto& [d, x, y, z] : size_tuples(input.world()))
    for (int experts : expert_parallelisms(input, d))
      for (TokenExchange exchange : token_exchanges(input, with_experts(Layout{d, x, y, z}, experts)))
        for (const auto& order : orders) out.push_back(with_experts(Layout{d, x, y, z, order}, experts, exchange));
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
  why = sharding_problem(input, l);
  if (!why.empty()) return why;
  const MemoryEstimate mem = estimate_memory(input, l);
  const double need = static_cast<double>(mem.total());
  const double have = usable_memory(input.machine);
  if (need > have) {
    // What the job fixed, and what "auto" tried at its least memory.
    std::vector<std::string> fixed, tried;
    if (input.recompute)
      fixed.push_back(std::string("training.recompute = ") + recompute_name(mem.recompute));
    else
      tried.push_back("recompute block");
    if (input.shard_optimizer)
      fixed.push_back(std::string("training.shard_optimizer = ") + (*input.shard_optimizer ? "true" : "false"));
    else if (mem.shard_optimizer)
      tried.push_back("the optimizer sharded");
    std::string memory = "does not fit in memory: needs " + gib(need) + " per GPU, has " + gib(have);
    for (size_t i = 0; i < fixed.size(); ++i)
      memory += (i == 0 ? " (" : ", ") + fixed[i] + (i + 1 == fixed.size() ? ")" : "");
    for (size_t i = 0; i < tried.size(); ++i)
      memory += (i == 0 ? " even with " : " and ") + tried[i] + (i + 1 == tried.size() ? ", the least memory" : "");
    return memory;
  }
  return "";
}

bool layout_runs(const ChooserInput& input, const Layout& l) { return !failure(input, l); }

int resolved_moe_chunks(const ChooserInput& input, const Layout& l, MemoryModes modes) {
  if (!input.model.moe_chunks_auto()) return input.model.moe_chunks;
  if (!input.model.moe()) return 1;
  return fewest_fastest(rounds_prices(input, l, modes));
}

std::string moe_chunks_reason(const ChooserInput& input, const Layout& l, MemoryModes modes) {
  const ModelShape& model = input.model;
  if (!model.moe() || model.moe_chunks == 1) return "";
  const MoeShape moe = moe_shape(model, batch_split(model, input.batch, l), l);
  std::string s = "model.moe_chunks = ";
  s += model.moe_chunks_auto() ? "auto" : std::to_string(model.moe_chunks);
  s += ": ";
  if (moe.max_rounds == 1) {
    s += "one exchange, as ";
    s += why_one_exchange(l, moe);
    return s;
  }
  if (!model.moe_chunks_auto()) {
    s += "the expert all-to-all runs in ";
    s += rounds_text(moe.rounds);
    return s;
  }
  const std::vector<CountPrice> prices = rounds_prices(input, l, modes);
  s += rounds_text(fewest_fastest(prices));
  s += ", the shortest predicted step (";
  for (size_t i = 0; i < prices.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(prices[i].chunks);
    s += ": ";
    s += format_number("%.4f", prices[i].step_s);
    s += " s";
  }
  s += ")";
  return s;
}

namespace {

// Whether the layout sums any linear layer's output or input gradient over x or y: where
// training.tp_chunks has something to split.
bool has_tensor_all_reduces(const Layout& l) { return l.x > 1 || l.y > 1; }

// The predicted step at each count "auto" tries: the powers of two up to kMaxTpChunks that
// split the micro-batch's rows.
std::vector<CountPrice> tp_chunks_prices(const ChooserInput& input, const Layout& l, MemoryModes modes) {
  const int64_t rows = batch_split(input.model, input.batch, l).tokens;
  ChooserInput at = input;
  std::vector<CountPrice> prices;
  for (int n = 1; n <= BatchShape::kMaxTpChunks && rows % n == 0; n *= 2) {
    at.batch.tp_chunks = n;
    prices.push_back({n, estimate_cost(at, l, predict_step_volume(at, l, modes), modes).step_s()});
  }
  return prices;
}

}  // namespace

int resolved_tp_chunks(const ChooserInput& input, const Layout& l, MemoryModes modes) {
  if (!input.batch.tp_chunks_auto()) return input.batch.tp_chunks;
  if (!has_tensor_all_reduces(l)) return 1;
  return fewest_fastest(tp_chunks_prices(input, l, modes));
}

std::string tp_chunks_reason(const ChooserInput& input, const Layout& l, MemoryModes modes) {
  const int chunks = input.batch.tp_chunks;
  if (chunks == 1) return "";
  std::string s = "training.tp_chunks = ";
  s += input.batch.tp_chunks_auto() ? "auto" : std::to_string(chunks);
  s += ": ";
  if (!has_tensor_all_reduces(l)) return s + "nothing to split, as no linear layer sums over x or y (G_x = G_y = 1)";
  if (!input.batch.tp_chunks_auto())
    return s + "each micro-batch's rows in " + std::to_string(chunks) +
           " chunks for the x and y all-reduces of the linear layers";
  ChooserInput at = input;
  at.model.moe_chunks = resolved_moe_chunks(input, l, modes);
  const std::vector<CountPrice> prices = tp_chunks_prices(at, l, modes);
  s += std::to_string(fewest_fastest(prices)) + " chunk(s), the shortest predicted step (";
  for (size_t i = 0; i < prices.size(); ++i)
    s += (i > 0 ? ", " : "") + std::to_string(prices[i].chunks) + ": " + format_number("%.4f", prices[i].step_s) + " s";
  return s + ")";
}

Candidate evaluate_layout(const ChooserInput& input, const Layout& l) {
  return evaluate_at(input, l, resolved_modes(input, l));
}

ChooserResult choose_among(const ChooserInput& input, const std::vector<Layout>& candidates) {
  check_world(input);
  // Rejection depends on the sizes and E_p only, so each (data, x, y, z, E_p) is checked once.
  // It is recorded once, keyed by the sizes and, where the check depends on it, E_p, and
  // carrying its smallest E_p and then axis order, so the rejected list is the same whatever
  // order the candidates come in.
  // The modes, like memory, depend on the sizes, E_p and the token exchange only.
  using Key = std::array<int, 6>;
  std::map<Key, std::optional<Failure>> checked;
  std::map<Key, MemoryModes> modes;
  std::map<Key, Layout> rejected;
  std::vector<Candidate> ranked;
  for (const Layout& l : candidates) {
    const Key key = {l.data, l.x, l.y, l.z, l.experts, exchange_index(l)};
    auto [it, fresh] = checked.try_emplace(key);
    if (fresh) it->second = failure(input, l);
    if (!it->second) {
      auto [mode, first_time] = modes.try_emplace(key);
      if (first_time) mode->second = resolved_modes(input, l);
      ranked.push_back(evaluate_at(input, l, mode->second));
      continue;
    }
    // A size tuple's token exchanges share one report (the hierarchical one's, as choose_layout).
    const Key rejection_key = {l.data, l.x, l.y, l.z, depends_on_expert_parallelism(*it->second) ? l.experts : 0, 0};
    auto [rej, first] = rejected.try_emplace(rejection_key, l);
    const auto reported_before = [](const Layout& a, const Layout& b) {
      return std::make_tuple(a.experts, exchange_index(a), order_index(a)) <
             std::make_tuple(b.experts, exchange_index(b), order_index(b));
    };
    if (!first && reported_before(l, rej->second)) rej->second = l;
  }
  std::vector<Rejection> rejections;
  for (const auto& [key, l] : rejected)
    rejections.push_back(rejection(input, l, *checked.at({l.data, l.x, l.y, l.z, l.experts, exchange_index(l)})));
  return finish(input, std::move(ranked), std::move(rejections));
}

ChooserResult choose_layout(const ChooserInput& input) {
  check_world(input);
  // The same result as choose_among over enumerate_layouts(input): a (size tuple, E_p, token
  // exchange) is checked once, and a rejected one is reported with its smallest axis order,
  // the default, once per (size tuple, E_p) (its hierarchical exchange's reason; the flat one
  // needs less memory, so it is rejected only where the hierarchical one is too); a size
  // tuple whose E_p = 1 fails a check that no E_p changes is reported once, at E_p = 1.
  const auto orders = all_orders();
  std::vector<Candidate> ranked;
  std::vector<Rejection> rejections;
  for (const auto& [d, x, y, z] : size_tuples(input.world())) {
    for (int experts : expert_parallelisms(input, d)) {
      bool stop = false;
      for (TokenExchange exchange : token_exchanges(input, with_experts(Layout{d, x, y, z}, experts))) {
        const Layout l = with_experts(Layout{d, x, y, z, orders.front()}, experts, exchange);
        if (const auto f = failure(input, l)) {
          if (exchange == TokenExchange::hierarchical) rejections.push_back(rejection(input, l, *f));
          stop = !depends_on_expert_parallelism(*f);
          continue;
        }
        const MemoryModes mode = resolved_modes(input, l);
        for (const auto& order : orders)
          ranked.push_back(evaluate_at(input, with_experts(Layout{d, x, y, z, order}, experts, exchange), mode));
      }
      if (stop) break;
    }
  }
  return finish(input, std::move(ranked), std::move(rejections));
}

}  // namespace axonn
