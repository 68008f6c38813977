#include "layout/layout_cost.hpp"

#include <algorithm>

#include "layout/memory_bound_bytes.hpp"
#include "layout/model_plan.hpp"

namespace axonn {

const char* link_tier_name(LinkTier tier) {
  switch (tier) {
    case LinkTier::none:
      return "-";
    case LinkTier::intra_node:
      return "intra-node";
    case LinkTier::inter_node:
      return "inter-node";
    case LinkTier::inter_switch:
      return "inter-switch";
  }
  return "?";
}

const MeasuredTier* measured_tier(const Machine& m, LinkTier tier) {
  switch (tier) {
    case LinkTier::intra_node:
      return &m.intra_node_measured;
    case LinkTier::inter_node:
      return &m.inter_node_measured;
    case LinkTier::inter_switch:
      return &m.inter_switch_measured;
    default:
      return nullptr;
  }
}

namespace {

// Do all aligned blocks of `span` consecutive ranks stay inside units of `unit` ranks?
bool contained(int64_t world, int64_t unit, int64_t span) { return world <= unit || unit % span == 0; }

const Link& link_of(const Machine& m, LinkTier tier) {
  switch (tier) {
    case LinkTier::inter_node:
      return m.inter_node;
    case LinkTier::inter_switch:
      return m.inter_switch;
    default:
      return m.intra_node;
  }
}

// The MoE blocks' GEMMs on one rank per micro-batch: each expert row through fc and proj
// (forward, dX, dW), and the router's logits and their two gradients. With a capacity the
// experts' rows are an upper bound: empty slots are not computed. With expert parallelism a
// rank's E_l experts run on the R_r rows they receive, `rows` exactly with a capacity and on
// average dropless (MoeShape), so the FLOPs are the same at every E_p.
double moe_flops_per_micro_batch(const ModelShape& model, const Layout& g, const BatchSplit& split) {
  const MoeShape moe = moe_shape(model, split, g);
  if (moe.layers == 0) return 0;
  // fc (c -> its width / G_y) and proj (F / G_y -> c), forward, dX and dW.
  const double c_local = static_cast<double>(model.hidden / g.x);
  const double widths_local = static_cast<double>(model.fc_width() + model.ffn()) / g.y;
  const double experts = 6.0 * static_cast<double>(moe.rows) * c_local * widths_local;
  const double router = 6.0 * static_cast<double>(split.tokens) * c_local * static_cast<double>(moe.experts);
  return static_cast<double>(moe.layers) * (experts + router);
}

// The GEMM rate where a shape has none of its own: the measured one, else peak x efficiency.
double default_gemm_rate(const Machine& m) {
  return m.gemm_flops > 0 ? m.gemm_flops : m.peak_flops * m.compute_efficiency;
}

// compute_s on a calibrated machine: the terms of flops_per_rank and recompute_flops_per_rank,
// each linear layer's GEMMs at the rate of its shape, attention at its measured rate (else
// the measured GEMM rate).
double measured_compute_s(const ChooserInput& input, const Layout& g, Recompute mode) {
  const Machine& machine = input.machine;
  const ModelShape& model = input.model;
  const BatchSplit split = batch_split(model, input.batch, g);
  const auto layers = linear_shapes(model);  // qkv, attn.proj, mlp.fc, mlp.proj, head
  const auto shapes = local_gemm_shapes(input, g);
  const int64_t blocks = recomputed_blocks(model, mode);
  const size_t rerun_gemms = mode == Recompute::attention ? 1 : mode == Recompute::block ? 3 : 0;
  const int64_t chunks = decided_tp_chunks(input.batch);
  double per_micro = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const GemmShape& s = shapes[i];
    // Forward, dX and dW per layer and micro-batch, and the forwards recomputation reruns.
    // With training.tp_chunks the forward GEMM runs in row chunks where its output is summed
    // over a, the dX GEMM where its output is summed over b, each chunk at its smaller
    // shape's rate; dW always whole.
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
    const auto seconds = [&](bool chunked) {
      return flops / gemm_rate(machine, chunked ? GemmShape{s.m / chunks, s.k, s.n} : s);
    };
    const double count = static_cast<double>(layers[i].count);
    const double forwards = count + (i < rerun_gemms ? static_cast<double>(blocks) : 0.0);
    per_micro += forwards * seconds(g.size(layers[i].k_axis) > 1) + count * seconds(g.size(layers[i].n_axis()) > 1) +
                 count * seconds(false);
  }
  const double T = model.sequence;
  const double head_dim = static_cast<double>(model.hidden) / model.heads;
  const double scores = split.micro_batch * (model.heads / g.y) * T * T * head_dim;  // one block's, per FLOP factor
  const double attention_rate = machine.attention_flops > 0 ? machine.attention_flops : default_gemm_rate(machine);
  per_micro += (12.0 * model.layers + 4.0 * static_cast<double>(blocks)) * scores / attention_rate;
  per_micro += moe_flops_per_micro_batch(model, g, split) / default_gemm_rate(machine);
  return per_micro * split.accumulation;
}

// What calibrate measured on groups of `group_size` over a tier (MeasuredTier::groups, each
// size at most once); nullptr where it measured no such size and the tier's own figures apply.
const MeasuredGroup* measured_group(const MeasuredTier& measured, int group_size) {
  for (const MeasuredGroup& group : measured.groups)
    if (group.ranks == group_size) return &group;
  return nullptr;
}

}  // namespace

const Link& collective_link(const Machine& m, LinkTier tier, CollectiveKind kind) {
  const MeasuredTier* measured = measured_tier(m, tier);
  if (measured != nullptr && measured->kinds[static_cast<size_t>(kind)])
    return *measured->kinds[static_cast<size_t>(kind)];
  return link_of(m, tier);
}

const SmallMessageLink* small_message_link(const Machine& m, LinkTier tier, CollectiveKind kind) {
  const MeasuredTier* measured = measured_tier(m, tier);
  if (measured == nullptr || !measured->small[static_cast<size_t>(kind)]) return nullptr;
  return &*measured->small[static_cast<size_t>(kind)];
}

const Link& collective_link(const Machine& m, LinkTier tier, CollectiveKind kind, int64_t bytes) {
  const SmallMessageLink* small = small_message_link(m, tier, kind);
  return small != nullptr && bytes <= small->max_bytes ? small->link : collective_link(m, tier, kind);
}

const Link& collective_link(const Machine& m, LinkTier tier, CollectiveKind kind, int64_t bytes, int group_size) {
  const MeasuredTier* measured = measured_tier(m, tier);
  if (measured == nullptr) return collective_link(m, tier, kind, bytes);
  const auto k = static_cast<size_t>(kind);
  if (const MeasuredGroup* group = measured_group(*measured, group_size); group != nullptr && group->kinds[k])
    return group->small[k] && bytes <= group->small[k]->max_bytes ? group->small[k]->link : *group->kinds[k];
  return collective_link(m, tier, kind, bytes);
}

std::optional<double> measured_call_seconds(const Machine& m, LinkTier tier, CollectiveKind kind, double bytes,
                                            int group_size) {
  const MeasuredTier* measured = measured_tier(m, tier);
  if (measured == nullptr) return std::nullopt;
  const auto k = static_cast<size_t>(kind);
  if (const MeasuredGroup* group = measured_group(*measured, group_size); group != nullptr && group->sweeps[k])
    return group->sweeps[k]->seconds_at(bytes, group_size);
  return measured->sweeps[k] ? measured->sweeps[k]->seconds_at(bytes, group_size) : std::nullopt;
}

const OverlapCurve* overlap_curve(const Machine& m, LinkTier tier, int group_size) {
  const MeasuredTier* measured = measured_tier(m, tier);
  if (measured == nullptr) return nullptr;
  if (const MeasuredGroup* group = measured_group(*measured, group_size); group != nullptr && !group->overlap.empty())
    return &group->overlap;
  return &measured->overlap;
}

double overlap_efficiency(const Machine& m, LinkTier tier, double bytes, int group_size) {
  const OverlapCurve* curve = overlap_curve(m, tier, group_size);
  return curve != nullptr ? curve->at(bytes) : 0;
}

namespace {

// A time-sharing fraction of groups of `group_size` over `tier`: the group size's own where
// calibrate measured that size, else the tier's; 0 where the tier is unmeasured.
double sharing_fraction(const Machine& m, LinkTier tier, int group_size, double MeasuredTier::*tier_field,
                        double MeasuredGroup::*group_field) {
  const MeasuredTier* measured = measured_tier(m, tier);
  if (measured == nullptr) return 0;
  if (const MeasuredGroup* group = measured_group(*measured, group_size)) return group->*group_field;
  return measured->*tier_field;
}

}  // namespace

double filled_by_others(const Machine& m, LinkTier tier, int group_size) {
  return sharing_fraction(m, tier, group_size, &MeasuredTier::filled_by_others, &MeasuredGroup::filled_by_others);
}

double cores_busy(const Machine& m, LinkTier tier, int group_size) {
  return sharing_fraction(m, tier, group_size, &MeasuredTier::cores_busy, &MeasuredGroup::cores_busy);
}

std::array<GemmShape, 5> local_gemm_shapes(const ChooserInput& input, const Layout& g) {
  const int64_t m = batch_split(input.model, input.batch, g).tokens;
  const auto layers = linear_shapes(input.model);
  std::array<GemmShape, 5> shapes;
  for (size_t i = 0; i < layers.size(); ++i)
    shapes[i] = {m, layers[i].k / g.size(layers[i].k_axis), layers[i].n / g.size(layers[i].n_axis())};
  return shapes;
}

double collective_calls_seconds(const Machine& machine, LinkTier tier, const CollectiveCalls& calls, int group_size) {
  if (const std::optional<double> measured =
          measured_call_seconds(machine, tier, calls.kind, static_cast<double>(calls.bytes), group_size))
    return static_cast<double>(calls.calls) * *measured;
  const Link& link = collective_link(machine, tier, calls.kind, calls.bytes, group_size);
  return static_cast<double>(calls.calls) *
         (ring_steps(calls.kind, group_size) * link.latency_s +
          bus_factor(calls.kind, group_size) * static_cast<double>(calls.bytes) / link.bandwidth_bytes_per_s);
}

double gemm_rate(const Machine& m, const GemmShape& shape) {
  for (const GemmRate& r : m.gemm_rates)
    if (r.shape == shape) return r.flops_per_s;
  return default_gemm_rate(m);
}

LinkTier axis_link(const Machine& machine, const Layout& g, CommAxis axis) {
  const int64_t world = g.world();
  const int64_t n = g.comm_size(axis), s = g.comm_stride(axis);
  if (n <= 1) return LinkTier::none;
  const int64_t per_node = machine.tasks_per_node;
  if (contained(world, per_node, s * n)) return LinkTier::intra_node;
  if (machine.nodes_per_switch <= 0) return LinkTier::inter_node;
  if (contained(world, per_node * machine.nodes_per_switch, s * n)) return LinkTier::inter_node;
  return LinkTier::inter_switch;
}

TierBytes bytes_per_tier(const Machine& machine, const Layout& g,
                         const std::array<int64_t, kCommAxisCount>& axis_bytes) {
  TierBytes tiers{};
  for (int a = 0; a < kCommAxisCount; ++a)
    tiers[static_cast<size_t>(axis_link(machine, g, static_cast<CommAxis>(a)))] += axis_bytes[static_cast<size_t>(a)];
  return tiers;
}

std::array<int64_t, kCommAxisCount> bytes_per_axis(const StepVolume& volume) {
  std::array<int64_t, kCommAxisCount> bytes{};
  for (int a = 0; a < kCommAxisCount; ++a) bytes[static_cast<size_t>(a)] = volume.bytes(static_cast<CommAxis>(a));
  return bytes;
}

std::array<int64_t, kCommAxisCount> bytes_per_axis(const StepVolume& volume, CollectiveKind kind) {
  std::array<int64_t, kCommAxisCount> bytes{};
  for (int a = 0; a < kCommAxisCount; ++a)
    bytes[static_cast<size_t>(a)] = volume.at(static_cast<CommAxis>(a), kind).bytes;
  return bytes;
}

double CostEstimate::comm_total_s() const {
  double t = 0;
  for (double c : comm_s) t += c;
  return t;
}

double flops_per_rank(const ChooserInput& input, const Layout& g) {
  const ModelShape& model = input.model;
  const BatchSplit split = batch_split(model, input.batch, g);
  const double m = static_cast<double>(split.tokens);
  double per_micro = 0;
  for (const auto& lin : linear_shapes(model))
    per_micro += 6.0 * m * static_cast<double>(lin.count) * static_cast<double>(lin.k / g.size(lin.k_axis)) *
                 static_cast<double>(lin.n / g.size(lin.n_axis()));
  const double T = model.sequence;
  const double head_dim = static_cast<double>(model.hidden) / model.heads;
  // Model FLOPs: backward's recompute of the scores (flash-style attention) is not counted.
  per_micro += model.layers * 12.0 * split.micro_batch * (model.heads / g.y) * T * T * head_dim;
  per_micro += moe_flops_per_micro_batch(model, g, split);
  return per_micro * split.accumulation;
}

double recompute_flops_per_rank(const ChooserInput& input, const Layout& g, Recompute mode) {
  const ModelShape& model = input.model;
  const int64_t blocks = recomputed_blocks(model, mode);
  if (blocks == 0) return 0;
  const BatchSplit split = batch_split(model, input.batch, g);
  const double m = static_cast<double>(split.tokens);
  const auto shapes = linear_shapes(model);                         // qkv, attn.proj, mlp.fc, mlp.proj, head
  const size_t rerun_gemms = mode == Recompute::attention ? 1 : 3;  // qkv; or qkv, attn.proj, mlp.fc
  double per_block = 0;
  for (size_t i = 0; i < rerun_gemms; ++i)
    per_block += 2.0 * m * static_cast<double>(shapes[i].k / g.size(shapes[i].k_axis)) *
                 static_cast<double>(shapes[i].n / g.size(shapes[i].n_axis()));
  const double T = model.sequence;
  const double head_dim = static_cast<double>(model.hidden) / model.heads;
  per_block += 4.0 * split.micro_batch * (model.heads / g.y) * T * T * head_dim;
  return per_block * static_cast<double>(blocks) * split.accumulation;
}

CostEstimate estimate_cost(const ChooserInput& input, const Layout& g, const StepVolume& volume) {
  return estimate_cost(input, g, volume, resolved_modes(input, g));
}

CostEstimate estimate_cost(const ChooserInput& input, const Layout& g, const StepVolume& volume, MemoryModes modes) {
  const Recompute mode = modes.recompute;
  CostEstimate c;
  c.recompute = mode;
  c.flops = flops_per_rank(input, g);
  c.recompute_flops = recompute_flops_per_rank(input, g, mode);
  c.compute_s = input.machine.calibrated_compute()
                    ? measured_compute_s(input, g, mode)
                    : (c.flops + c.recompute_flops) / (input.machine.peak_flops * input.machine.compute_efficiency);
  if (input.machine.elementwise_bytes_per_s > 0) {
    c.memory_bound_s = memory_bound_bytes_per_rank(input, g, modes) / input.machine.elementwise_bytes_per_s;
    c.compute_s += c.memory_bound_s;
  }
  for (int ai = 0; ai < kCommAxisCount; ++ai)
    c.link[static_cast<size_t>(ai)] = axis_link(input.machine, g, static_cast<CommAxis>(ai));
  // Hidden: the overlapped calls' time at their tier's efficiency, the gradient buckets' (over
  // data, and the experts' over expert_data) at most one micro-batch's compute (they run beside
  // the last backward), the expert all-to-all's pipelined rounds at most the experts' GEMMs
  // but one round's (n rounds: each round's GEMMs hide the next round's move), each dX
  // all-reduce (OAR) at most its dW GEMM's time, all of it at most the step's.
  // Filled: the blocking calls' time at their tier's and group size's fill, which other ranks
  // on the same cores compute through (0 where every rank has cores of its own), at most the
  // compute not already beside a hidden collective.
  // Busy: every call's time at its tier's and group size's cores_busy, which neither credit
  // takes off (where ranks share cores, a collective's own copying and summing keeps them).
  // Per category (the caps below) and axis, before the caps.
  enum Category { data_buckets, expert_rounds, beside_gemm, beside_step, kCategories };
  std::array<std::array<double, kCommAxisCount>, kCategories> hidden_by{};
  double filled = 0;
  for (const CollectiveCalls& calls : volume.calls) {
    const auto ai = static_cast<size_t>(calls.axis);
    const double t = collective_calls_seconds(input.machine, c.link[ai], calls, volume.group_size[ai]);
    c.comm_s[ai] += t;
    // Only where measured, as the fill below.
    if (const double busy = cores_busy(input.machine, c.link[ai], volume.group_size[ai]); busy > 0)
      c.busy_s += t * busy;
    if (!calls.overlapped) {
      // Only where measured: 0 x an infinite time (a link of no bandwidth) would be NaN.
      if (const double fill = filled_by_others(input.machine, c.link[ai], volume.group_size[ai]); fill > 0)
        filled += t * fill;
      continue;
    }
    c.overlapped_s += t;
    c.overlapped_axis_s[ai] += t;
    const bool bucket = calls.axis == CommAxis::data || calls.axis == CommAxis::expert_data;
    const Category category = bucket                          ? data_buckets
                              : calls.axis == CommAxis::expert ? expert_rounds
                              : calls.beside.m > 0             ? beside_gemm
                                                               : beside_step;
    double hidden =
        t * overlap_efficiency(input.machine, c.link[ai], static_cast<double>(calls.bytes), volume.group_size[ai]);
    if (category == beside_gemm) {
      const GemmShape& s = calls.beside;
      const double gemm_s = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n) /
                            gemm_rate(input.machine, s);
      hidden = std::min(hidden, static_cast<double>(calls.calls) * gemm_s);
    }
    hidden_by[category][ai] += hidden;
  }
  std::array<double, kCategories> raw{};
  for (int k = 0; k < kCategories; ++k)
    for (const double h : hidden_by[static_cast<size_t>(k)]) raw[static_cast<size_t>(k)] += h;
  const BatchSplit split = batch_split(input.model, input.batch, g);
  const double accumulation = static_cast<double>(split.accumulation);
  const MoeShape moe = moe_shape(input.model, split, g);
  const double rounds = static_cast<double>(decided_rounds(moe));
  const double experts_s =
      accumulation * moe_flops_per_micro_batch(input.model, g, split) / default_gemm_rate(input.machine);
  std::array<double, kCategories> capped = raw;
  capped[data_buckets] = std::min(raw[data_buckets], c.compute_s / accumulation);
  capped[expert_rounds] = std::min(raw[expert_rounds], experts_s * (rounds - 1) / rounds);
  double category_total = 0;
  for (const double h : capped) category_total += h;
  c.hidden_s = std::min(c.compute_s, category_total);
  // Below zero (a tier whose overlap costs): the overlapped calls' extra time, added to the
  // step; the fill's caps count only what overlap hides.
  c.filled_s = std::min(filled, c.compute_s - std::max(0.0, c.hidden_s));
  const double creditable = std::max(0.0, c.comm_total_s() - c.busy_s);
  c.hidden_s = std::min(c.hidden_s, creditable);
  c.filled_s = std::min(c.filled_s, creditable - std::max(0.0, c.hidden_s));
  // Each axis's share: its hidden time in each category scaled by that category's cap, then
  // all by the step's caps.
  const double step_scale = category_total > 0 ? c.hidden_s / category_total : 1.0;
  for (size_t k = 0; k < kCategories; ++k) {
    const double category_scale = raw[k] > 0 ? capped[k] / raw[k] : 1.0;
    for (size_t a = 0; a < kCommAxisCount; ++a) c.hidden_axis_s[a] += hidden_by[k][a] * category_scale * step_scale;
  }
  return c;
}

}  // namespace axonn
