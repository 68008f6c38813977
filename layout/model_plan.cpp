#include "layout/model_plan.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>

#include "layout/divisors.hpp"

namespace axonn {

std::array<LinearShape, 5> linear_shapes(const ModelShape& m) {
  const int64_t C = m.hidden, L = m.layers, dense = L - m.moe_layers();
  return {{{C, m.qkv_width(), Axis::x, L},
           {C, C, Axis::y, L},
           {C, m.fc_width(), Axis::x, dense},
           {m.ffn(), C, Axis::y, dense},
           {C, m.vocab, Axis::x, 1}}};
}

int64_t expert_capacity_per_sequence(const ModelShape& m) {
  if (!m.moe() || m.capacity_factor <= 0) return 0;
  const double slots = m.capacity_factor * m.sequence * m.top_k / m.experts;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(slots - 1e-9)));
}

namespace {

// The experts `layout` leaves each rank: E / E_p. Throws expert_problem's message when E_p
// does not divide E (a dense model has none to split).
int64_t local_experts(const ModelShape& m, const Layout& g) {
  if (!m.moe()) return 0;
  if (!expert_parallelism_fits(m, g)) throw LayoutError(expert_problem(m, g));
  return m.experts / g.experts;
}

// One expert's biases on a rank: fc's (its width / G_y) and proj's (C/G_x); none without biases.
int64_t expert_biases(const ModelShape& m, const Layout& g) {
  return m.bias ? m.fc_width() / g.y + m.hidden / g.x : 0;
}

}  // namespace

MoeShape moe_shape(const ModelShape& m, const BatchSplit& split, const Layout& g) {
  MoeShape s;
  if (!m.moe()) return s;
  s.layers = m.moe_layers();
  s.experts = m.experts;
  s.top_k = m.top_k;
  s.capacity_per_sequence = expert_capacity_per_sequence(m);
  s.rows = s.capacity_per_sequence > 0 ? s.experts * split.micro_batch * s.capacity_per_sequence
                                       : split.tokens * s.top_k;
  s.expert_ranks = g.experts;
  s.local_experts = local_experts(m, g);
  // Capacity: every sender's E_l segments for this rank, P·E_l·mb·cap = rows. Dropless: at
  // most every row of every rank of the expert group.
  s.expert_rows = s.dropless() ? s.expert_ranks * s.rows : s.rows;
  s.peer_rows = s.local_experts * split.micro_batch * s.capacity_per_sequence;
  const bool hierarchical = g.exchange == TokenExchange::hierarchical;
  s.y_shares = hierarchical && s.expert_ranks > 1 && g.y > 1 && s.rows % g.y == 0 ? g.y : 1;
  if (s.expert_ranks > 1 && s.expert_ranks * split.tokens * s.y_shares < s.rows) {
    s.gathers = true;
    s.y_shares = 1;
  }
  const bool experts_unsplit = g.x == 1 && g.y == 1;
  if (s.expert_ranks > 1 && !s.gathers && experts_unsplit) s.max_rounds = s.local_experts;
  s.rounds = m.moe_chunks_auto() ? (s.max_rounds > 1 ? 0 : 1) : std::min<int64_t>(m.moe_chunks, s.max_rounds);
  return s;
}

int64_t decided_rounds(const MoeShape& shape) {
  if (shape.rounds < 1)
    throw LayoutError(
        "model.moe_chunks = \"auto\" is undecided here: the layout model picks the rounds per layout "
        "(resolved_moe_chunks); decide them before predicting or running the step, as the chooser and "
        "run_training do");
  return shape.rounds;
}

MoeShape moe_shape(const ModelShape& m, const BatchSplit& split) { return moe_shape(m, split, Layout{}); }

BatchSplit batch_split(const ModelShape& model, const BatchShape& batch, const Layout& layout) {
  const int ways = layout.data * layout.z;
  if (batch.global_batch % ways != 0)
    throw LayoutError("global_batch=" + std::to_string(batch.global_batch) + " is not divisible by G_data*G_z=" +
                      std::to_string(ways) + " (layout " + format_layout(layout) + ")");
  BatchSplit s;
  s.sequences_per_rank = batch.global_batch / ways;
  s.micro_batch = 1;
  for (int d = 1; d <= std::min(batch.micro_batch, s.sequences_per_rank); ++d)
    if (s.sequences_per_rank % d == 0) s.micro_batch = d;
  s.accumulation = s.sequences_per_rank / s.micro_batch;
  s.tokens = static_cast<int64_t>(s.micro_batch) * model.sequence;
  return s;
}

ParameterCount parameters_per_rank(const ModelShape& m, const Layout& g) {
  ParameterCount p;
  const int64_t tensor = int64_t{g.x} * g.y * g.z;
  for (const auto& lin : linear_shapes(m)) p.big += lin.count * (lin.k * lin.n / tensor);
  const int64_t C = m.hidden;
  if (!m.tie_embeddings) p.big += int64_t{m.vocab} * C / tensor;  // lm_head beside wte
  // Per block: ln1, ln2 (gain C/G_x each, and LayerNorm's beta), and with biases qkv's
  // (its width / G_y), attn.proj's C/G_x, mlp.fc's (its width / G_y), mlp.proj's C/G_x. Then
  // ln_f, and wpe (T x C/G_x) with learned positions.
  const int64_t norm = (m.norm == Norm::layernorm && m.bias ? 2 : 1) * C / g.x;
  const int64_t biases = m.bias ? (m.qkv_width() + m.fc_width()) / g.y + 2 * C / g.x : 0;
  p.small = m.layers * (2 * norm + biases) + norm;
  if (m.positions == Positions::learned) p.small += int64_t{m.sequence} * C / g.x;
  // An MoE block: its E_l local experts' fc and proj instead of one MLP's (with biases, fc's
  // width / G_y and C/G_x each), and the router [C/G_x, E] (every rank routes to every expert).
  const int64_t moe = m.moe_layers(), local = local_experts(m, g), E = m.experts;
  p.big += moe * local * ((m.fc_width() + m.ffn()) * C / tensor);
  p.small += moe * ((local - 1) * expert_biases(m, g) + C / g.x * E);
  return p;
}

GradientBuckets gradient_buckets(const ModelShape& m, const Layout& g) {
  const auto shapes = linear_shapes(m);  // qkv, attn.proj, mlp.fc, mlp.proj, then the head
  const int64_t tensor = int64_t{g.x} * g.y * g.z;
  GradientBuckets b;
  for (size_t i = 0; i + 1 < shapes.size(); ++i) b.block += shapes[i].k * shapes[i].n / tensor;
  const int64_t C = m.hidden, local = local_experts(m, g);
  b.moe_attention = (m.qkv_width() + C) * C / tensor;
  b.moe_experts = local * ((m.fc_width() + m.ffn()) * C / tensor);
  b.wte = (m.tie_embeddings ? 1 : 2) * (shapes.back().k * shapes.back().n / tensor);  // and lm_head
  b.layers = m.layers;
  b.moe_layers = m.moe_layers();
  b.small_experts = b.moe_layers * local * expert_biases(m, g);
  b.small = parameters_per_rank(m, g).small - b.small_experts;
  return b;
}

ShardedCount sharded_count(const ModelShape& m, const Layout& g, bool shard) {
  const GradientBuckets b = gradient_buckets(m, g);
  const int ways = shards_optimizer(g, shard) ? g.data : 1;
  // Each bucket padded to `ways` pieces: the weight buckets (blocks, experts, wte), then the
  // small tensors' ("small.experts" is empty, and pads to nothing, in a dense model).
  const auto sum = [&](auto piece) {
    const int64_t weights = b.dense_layers() * piece(b.block) +
                            b.moe_layers * (piece(b.moe_attention) + piece(b.moe_experts)) + piece(b.wte);
    return std::pair{weights, weights + piece(b.small) + piece(b.small_experts)};
  };
  ShardedCount c;
  std::tie(c.stored_big, c.stored) = sum([&](int64_t n) { return padded_bucket(n, ways); });
  std::tie(c.owned_big, c.owned) = sum([&](int64_t n) { return shard_piece(n, ways); });
  return c;
}

int64_t parameters_total(const ModelShape& m) {
  Layout one;
  return parameters_per_rank(m, one).total();
}

namespace {

// The model-dimension checks (divisibility_checks), then the expert parallelism's, then
// training.tp_chunks'.

struct Check {
  const char* dim;
  int64_t value;
  const char* by;
  int64_t ways;
};

std::array<Check, kExpertCheck> divisibility_checks(const ModelShape& m, const BatchShape& batch, const Layout& g) {
  const int64_t C = m.hidden;
  return {{
      {"hidden", C, "G_x*G_z", int64_t{g.x} * g.z},  // xy layers: k = C over x then z
      {"hidden", C, "G_y*G_z", int64_t{g.y} * g.z},  // attn.proj: k = C over y then z
      {"mlp_hidden", m.ffn(), "G_y*G_z", int64_t{g.y} * g.z},  // mlp.proj: k = F over y then z
      // attention runs on whole heads; grouped, on whole key/value groups
      m.grouped_attention() ? Check{"kv_heads", m.kv(), "G_y", g.y} : Check{"heads", m.heads, "G_y", g.y},
      {"vocab", m.vocab, "G_y", g.y},  // vocab-parallel head and loss
      {"global_batch", batch.global_batch, "G_data*G_z", int64_t{g.data} * g.z},
  }};
}

// The expert parallelisms above 1 that would suit the model: divisors of both E and G_data
// (the layout's rule), as "e2, e4"; empty when there is none.
std::string expert_parallelisms_that_divide(int experts, int data) {
  std::string list;
  for (int64_t d : divisors(std::gcd(experts, data))) {
    if (d == 1) continue;
    list += list.empty() ? "e" : ", e";
    list += std::to_string(d);
  }
  return list;
}

}  // namespace

std::string expert_problem(const ModelShape& m, const Layout& g) {
  if (expert_parallelism_fits(m, g)) return "";
  const std::string ep = std::to_string(g.experts);
  std::string why = "e" + ep;
  why += " asks for expert parallelism " + ep;
  if (!m.moe()) return why + " but the model is dense; set model.experts or drop 'e" + ep + "'";
  const std::string experts = std::to_string(m.experts);
  why += ", which does not divide model.experts = " + experts + "; ";
  const std::string fits = expert_parallelisms_that_divide(m.experts, g.data);
  if (fits.empty())
    return why + "no expert parallelism above 1 divides both " + experts + " and G_data = " + std::to_string(g.data) +
           ": drop 'e" + ep + "'";
  return why + "use one that divides both " + experts + " and G_data = " + std::to_string(g.data) + " (" + fits +
         "), or drop 'e" + ep + "'";
}

Indivisible first_indivisible(const ModelShape& m, const BatchShape& batch, const Layout& g) {
  const auto checks = divisibility_checks(m, batch, g);
  for (size_t i = 0; i < checks.size(); ++i)
    if (checks[i].value % checks[i].ways != 0) return {static_cast<int>(i), checks[i].ways};
  if (!expert_parallelism_fits(m, g)) return {kExpertCheck, g.experts};
  if (batch.tp_chunks > 1 && batch_split(m, batch, g).tokens % batch.tp_chunks != 0)
    return {kTpChunksCheck, batch.tp_chunks};
  return {};
}

int64_t decided_tp_chunks(const BatchShape& batch) {
  if (batch.tp_chunks_auto())
    throw LayoutError(
        "training.tp_chunks = \"auto\" is undecided here: the layout model picks the count per layout "
        "(resolved_tp_chunks); decide it before predicting or running the step, as the chooser and run_training do");
  return batch.tp_chunks;
}

std::string tp_chunks_problem(const ModelShape& m, const BatchShape& batch, const Layout& g) {
  if (batch.tp_chunks <= 1 || batch.global_batch % (g.data * g.z) != 0) return "";
  const BatchSplit split = batch_split(m, batch, g);
  if (split.tokens % batch.tp_chunks == 0) return "";
  std::string counts;
  for (const int64_t d : divisors(split.tokens)) {
    if (d > BatchShape::kMaxTpChunks) break;
    counts += std::to_string(d) + ", ";
  }
  return "training.tp_chunks = " + std::to_string(batch.tp_chunks) + " does not split the micro-batch's " +
         std::to_string(split.tokens) + " rows (micro-batch " + std::to_string(split.micro_batch) + " x sequence " +
         std::to_string(m.sequence) + " at layout " + format_layout(g) + ") into equal chunks; counts that would: " +
         counts + "or \"auto\"";
}

std::string divisibility_problem(const ModelShape& m, const BatchShape& batch, const Layout& g) {
  const Indivisible bad = first_indivisible(m, batch, g);
  if (bad.check < 0) return "";
  if (bad.check == kExpertCheck) return expert_problem(m, g);
  if (bad.check == kTpChunksCheck) return tp_chunks_problem(m, batch, g);
  const auto checks = divisibility_checks(m, batch, g);
  const Check& c = checks[static_cast<size_t>(bad.check)];
  return std::string(c.dim) + "=" + std::to_string(c.value) + " is not divisible by " + c.by + "=" +
         std::to_string(c.ways);
}

}  // namespace axonn
