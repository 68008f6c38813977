#include "layout/layout_report.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "core/number_text.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// Right-aligned columns: column c is widths[c] wide, or one wider than its widest cell where
// that is more, so a cell never runs into its neighbour however large the numbers get.
std::string format_columns(std::vector<size_t> widths, const std::vector<std::vector<std::string>>& rows) {
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) widths[c] = std::max(widths[c], row[c].size() + 1);
  std::string s;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) s.append(pad_left(row[c], widths[c]));
    s.push_back('\n');
  }
  return s;
}

std::string mib(int64_t bytes) { return format_number("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

// "812 KiB", "3.4 MiB", "71.20 GiB"
std::string human_bytes(double bytes) {
  if (bytes < 1024.0 * 1024.0) return format_number("%.0f KiB", bytes / 1024.0);
  if (bytes < 1024.0 * 1024.0 * 1024.0) return format_number("%.1f MiB", bytes / (1024.0 * 1024.0));
  return format_number("%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

// What a calibrated site measured and the model uses instead of the guesses ("" when nothing).
std::string describe_calibration(const Machine& m) {
  std::string s;
  if (m.calibrated_compute()) {
    s += "  measured compute: each linear layer's GEMMs at the rate measured for its shape (" +
         std::to_string(m.gemm_rates.size()) + " shape(s)), else" +
         (m.attention_flops > 0 ? "" : " and for attention") + " at " +
         (m.gemm_flops > 0 ? format_number("%.3g FLOP/s (measured)", m.gemm_flops) : std::string("peak x efficiency")) +
         "\n";
    if (m.attention_flops > 0) s += "  measured attention: " + format_number("%.3g FLOP/s", m.attention_flops) + "\n";
  }
  if (m.elementwise_bytes_per_s > 0)
    s += "  measured memory-bound ops (LayerNorm, GELU, bias, cross-entropy, AdamW): their bytes at " +
         format_number("%.3g GB/s", m.elementwise_bytes_per_s / 1e9) + "\n";
  const std::array<std::pair<LinkTier, const MeasuredTier*>, 3> tiers = {
      {{LinkTier::intra_node, &m.intra_node_measured},
       {LinkTier::inter_node, &m.inter_node_measured},
       {LinkTier::inter_switch, &m.inter_switch_measured}}};
  // "  measured intra-node all_reduce[ on groups of 2]: alpha 30 us, beta 2 GB/s[; up to ...]
  // [; on groups of 2 from 4096 to 268435456 bytes its 17 measured sizes]"
  const auto fit_lines = [&](LinkTier tier, const std::string& groups, const KindLinks& kinds,
                             const SmallMessageLinks& smalls, const KindSweeps& sweeps) {
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const auto& fit = kinds[static_cast<size_t>(k)];
      if (!fit) continue;
      s += std::string("  measured ") + link_tier_name(tier) + " " + collective_name(static_cast<CollectiveKind>(k)) +
           groups + ": alpha " + format_number("%.3g", fit->latency_s * 1e6) + " us, beta " +
           format_number("%.3g", fit->bandwidth_bytes_per_s / 1e9) + " GB/s";
      if (const auto& small = smalls[static_cast<size_t>(k)])
        s += "; up to " + std::to_string(small->max_bytes) + " bytes alpha " +
             format_number("%.3g", small->link.latency_s * 1e6) + " us, beta " +
             format_number("%.3g", small->link.bandwidth_bytes_per_s / 1e9) + " GB/s";
      if (const auto& sweep = sweeps[static_cast<size_t>(k)]; sweep && !sweep->points.empty())
        s += "; on groups of " + std::to_string(sweep->ranks) + " from " +
             format_number("%.0f", sweep->points.front().bytes) + " to " +
             format_number("%.0f", sweep->points.back().bytes) + " bytes its " + std::to_string(sweep->points.size()) +
             " measured sizes";
      s += "\n";
    }
  };
  for (const auto& [tier, measured] : tiers) {
    fit_lines(tier, "", measured->kinds, measured->small, measured->sweeps);
    for (const MeasuredGroup& group : measured->groups)
      fit_lines(tier, " on groups of " + std::to_string(group.ranks), group.kinds, group.small, group.sweeps);
    if (!measured->overlap.empty())
      s += std::string("  measured ") + link_tier_name(tier) + " overlap: " + overlap_curve_text(measured->overlap) +
           " of an overlapped collective's time hidden behind compute (below 0: the extra it costs)\n";
    // "30%, 45% on groups of 2": the tier's fraction `field`, then each group size's.
    const auto fractions = [](const MeasuredTier& t, double MeasuredTier::*tier_field,
                              double MeasuredGroup::*group_field) {
      std::string out;
      if (t.*tier_field > 0) out += format_number("%.0f%%", 100 * (t.*tier_field));
      for (const MeasuredGroup& group : t.groups)
        if (group.*group_field > 0)
          out += (out.empty() ? "" : ", ") + format_number("%.0f%%", 100 * (group.*group_field)) + " on groups of " +
                 std::to_string(group.ranks);
      return out;
    };
    if (const std::string fills =
            fractions(*measured, &MeasuredTier::filled_by_others, &MeasuredGroup::filled_by_others);
        !fills.empty())
      s += std::string("  measured ") + link_tier_name(tier) + " time-sharing: " + fills +
           " of a blocking collective's time other ranks on the same cores compute through\n";
    if (const std::string busy = fractions(*measured, &MeasuredTier::cores_busy, &MeasuredGroup::cores_busy);
        !busy.empty())
      s += std::string("  measured ") + link_tier_name(tier) + " cores busy: " + busy +
           " of the node's cores kept busy by a collective's own ranks for its time, which no credit takes off\n";
  }
  return s;
}

const char* exchange_name(const Layout& l) { return l.exchange == TokenExchange::flat ? "flat" : "hierarchical"; }

// How `c` moves its tokens to the experts: "-" without expert parallelism, "all-gather"
// (MoeShape::gathers), else the all-to-all's exchange.
std::string dispatch_name(const Candidate& c) {
  if (c.layout.experts == 1) return "-";
  // What was priced says which dispatch it is: the all-gather dispatch has no all-to-all.
  if (c.volume.at(CommAxis::expert, CollectiveKind::all_to_all).calls == 0) return "all-gather";
  return exchange_name(c.layout);
}

// The token exchange's bytes per rank and step on each link tier: every collective on the
// expert axis, and the y all-gathers (all-to-alls) of the hierarchical exchange.
TierBytes exchange_bytes_per_tier(const Machine& machine, const Candidate& c) {
  std::array<int64_t, kCommAxisCount> bytes{};
  bytes[static_cast<size_t>(CommAxis::expert)] = c.volume.bytes(CommAxis::expert);
  bytes[static_cast<size_t>(CommAxis::y)] = c.volume.at(CommAxis::y, CollectiveKind::all_to_all).bytes;
  return bytes_per_tier(machine, c.layout, bytes);
}

// The same placement under the other token exchange, or nullptr where it was not priced.
const Candidate* other_exchange(const ChooserResult& r, const Candidate& c) {
  Layout other = c.layout;
  other.exchange = c.layout.exchange == TokenExchange::flat ? TokenExchange::hierarchical : TokenExchange::flat;
  for (const Candidate& o : r.ranked)
    if (o.layout == other) return &o;
  return nullptr;
}

// For an MoE job: where each listed candidate's token all-to-alls run (bytes per rank and step
// on each link tier), which exchange the best one uses and what the other would cost, and why
// it beat the best placement without expert parallelism.
std::string explain_expert_placement(const ChooserResult& r, size_t listed) {
  const Candidate& best = r.best();
  std::string s =
      "MoE placement: the token exchange's MiB per rank and step on each link tier (every collective\n"
      "on the expert axis and, hierarchical, the y all-gathers):\n";
  std::vector<std::vector<std::string>> rows = {
      {"#", "layout", "order", "exchange", "intra-node", "inter-node", "inter-switch", "step ms"}};
  for (size_t i = 0; i < listed; ++i) {
    const Candidate& c = r.ranked[i];
    const TierBytes tiers = exchange_bytes_per_tier(r.input.machine, c);
    rows.push_back(
        {std::to_string(i + 1), format_layout(c.layout), format_order(c.layout), dispatch_name(c),
         mib(tiers[static_cast<size_t>(LinkTier::intra_node)]), mib(tiers[static_cast<size_t>(LinkTier::inter_node)]),
         mib(tiers[static_cast<size_t>(LinkTier::inter_switch)]), format_number("%.3f", c.cost.step_s() * 1e3)});
  }
  s += format_columns({3, 12, 6, 13, 11, 11, 13, 10}, rows);
  if (dispatch_name(best) == "all-gather") {
    s += "token exchange: all-gather: the expert group gathers its " + std::to_string(best.layout.experts) +
         " ranks' tokens and sums the outputs back by a reduce-scatter, fewer rows than the all-to-all's (" +
         link_tier_name(best.cost.link[static_cast<size_t>(CommAxis::expert)]) + " links)\n";
  } else if (best.layout.experts > 1 && best.layout.y > 1) {
    const std::string y = std::to_string(best.layout.y);
    const std::string expert_link = link_tier_name(best.cost.link[static_cast<size_t>(CommAxis::expert)]);
    const std::string y_link = link_tier_name(best.cost.link[static_cast<size_t>(CommAxis::y)]);
    if (best.volume.at(CommAxis::y, CollectiveKind::all_to_all).calls > 0)
      s += "token exchange: hierarchical: each of the " + y + " y ranks sends 1/" + y +
           " of its rows over the expert group (" + expert_link + " links) and the y group all-gathers them (" +
           y_link + " links)";
    else
      s += "token exchange: flat: each of the " + y + " y ranks sends all of its rows over the expert group (" +
           expert_link + " links), with no y all-gather (" + y_link + " links)";
    if (const Candidate* other = other_exchange(r, best))
      s += "; " + std::string(exchange_name(other->layout)) + " here (" + format_layout_with_order(other->layout) +
           "): " + other->why_lost;
    s += "\n";
  }
  const auto dense_style = [](const Candidate& c) { return c.layout.experts == 1; };
  if (best.layout.experts > 1) {
    const auto dense = std::find_if(r.ranked.begin(), r.ranked.end(), dense_style);
    if (dense == r.ranked.end())
      s += "no placement without expert parallelism was priced (every E_p = 1 layout was rejected)\n";
    else
      s += "best without expert parallelism (E_p = 1: every rank holds every expert, as a dense MLP): " +
           format_layout_with_order(dense->layout) + ", " + dense->why_lost + "\n";
  } else {
    const auto expert = std::find_if_not(r.ranked.begin(), r.ranked.end(), dense_style);
    if (expert != r.ranked.end())
      s += "best with expert parallelism: " + format_layout_with_order(expert->layout) + ", " + expert->why_lost + "\n";
    else
      s += "no layout with expert parallelism was priced (every E_p > 1 was rejected; see below)\n";
  }
  return s;
}

// "7196.8 ms in the step, 1312.4 ms of 2653.0 ms overlapped hidden behind compute" for one
// axis of `cost`: what the step pays for it, and what overlap took off.
std::string axis_time_text(const CostEstimate& cost, size_t axis) {
  const double hidden = cost.hidden_axis_s[axis];
  std::string s = format_number("%.1f ms", 1e3 * (cost.comm_s[axis] - hidden)) + " in the step";
  if (cost.overlapped_axis_s[axis] <= 0) return s + ", none overlapped";
  return s + ", " + format_number("%.1f ms", 1e3 * hidden) + " of " +
         format_number("%.1f ms", 1e3 * cost.overlapped_axis_s[axis]) + " overlapped " +
         (hidden < 0 ? "added by the overlap" : "hidden behind compute");
}

}  // namespace

std::string format_ranked_table(const ChooserResult& r, int top_k) {
  std::vector<size_t> widths = {3, 12, 6, 11, 10};
  std::vector<std::string> header = {"#", "layout", "order", "step ms", "compute"};
  const size_t n = std::min(r.ranked.size(), static_cast<size_t>(std::max(top_k, 1)));
  // The grid axes and the world always; the expert axes where a listed layout has them.
  std::vector<int> axes;
  for (int a = 0; a < kCommAxisCount; ++a) {
    bool used = a <= static_cast<int>(CommAxis::world);
    for (size_t i = 0; i < n && !used; ++i) used = r.ranked[i].volume.group_size[static_cast<size_t>(a)] > 1;
    if (!used) continue;
    axes.push_back(a);
    header.push_back(comm_axis_name(static_cast<CommAxis>(a)) + " ms/MiB");
    widths.push_back(17);
  }
  header.insert(header.end(), {"recompute", "optimizer", "memory", "free"});
  widths.insert(widths.end(), {10, 10, 11, 6});
  std::vector<std::vector<std::string>> rows = {header};
  const double usable = usable_memory(r.input.machine);
  for (size_t i = 0; i < n; ++i) {
    const Candidate& c = r.ranked[i];
    auto& row = rows.emplace_back();
    row = {std::to_string(i + 1), format_layout(c.layout), format_order(c.layout),
           format_number("%.3f", c.cost.step_s() * 1e3), format_number("%.3f", c.cost.compute_s * 1e3)};
    for (int a : axes) {
      const auto axis = static_cast<CommAxis>(a);
      row.push_back(c.volume.group_size[static_cast<size_t>(a)] > 1
                        ? format_number("%.3f", c.cost.comm_s[static_cast<size_t>(a)] * 1e3)
                              .append("/")
                              .append(mib(c.volume.bytes(axis)))
                        : "-");
    }
    const double used = static_cast<double>(c.memory.total());
    row.push_back(recompute_name(c.recompute));
    row.push_back(c.shard_optimizer ? "sharded" : "whole");
    row.push_back(human_bytes(used));
    row.push_back(format_number("%.0f%%", 100.0 * (1.0 - used / usable)));
  }
  std::string s = format_columns(widths, rows);
  if (r.ranked.size() > n) s.append("   ... ").append(std::to_string(r.ranked.size() - n)).append(" more (--top K)\n");
  return s;
}

namespace {

// "architecture: ..." for a model that is not GPT-2's form (docs/llama.md), else nothing: what
// the counts above are of, since the same layers and hidden size cost differently.
std::string describe_architecture(const ModelShape& m) {
  const ModelShape gpt2;
  if (m.norm == gpt2.norm && m.mlp == gpt2.mlp && m.positions == gpt2.positions && m.kv() == m.heads &&
      m.bias == gpt2.bias && m.tie_embeddings == gpt2.tie_embeddings && m.ffn() == 4 * int64_t{m.hidden})
    return "";
  std::string s = "architecture: ";
  s.append(norm_name(m.norm)).append(" (eps ").append(format_number("%g", m.norm_eps)).append("), ");
  s.append(mlp_name(m.mlp)).append(" MLP of ").append(std::to_string(m.ffn())).append(", ");
  if (m.positions == Positions::rope) {
    s.append("rope (theta ").append(format_number("%g", m.rope_theta));
    if (m.rope_scaling) s.append(", llama3 scaling x").append(format_number("%g", m.rope_scaling->factor));
    s.append("), ");
  } else {
    s.append("learned positions, ");
  }
  s.append(std::to_string(m.kv())).append(" key/value heads for ").append(std::to_string(m.heads));
  s.append(" query heads, ").append(m.bias ? "biases" : "no biases");
  s.append(m.tie_embeddings ? ", tied embeddings\n" : ", untied embeddings\n");
  return s;
}

}  // namespace

std::string format_explain(const ChooserResult& r, int top_k) {
  std::string s;
  const ChooserInput& in = r.input;
  s += "job: " + std::to_string(in.model.layers) + " layers, hidden " + std::to_string(in.model.hidden) + ", " +
       std::to_string(in.model.heads) + " heads, vocab " + std::to_string(in.model.vocab) + ", sequence " +
       std::to_string(in.model.sequence) + " (" +
       format_number("%.1f", static_cast<double>(parameters_total(in.model)) / 1e6) + "M parameters); global batch " +
       std::to_string(in.batch.global_batch) + ", micro-batch <= " + std::to_string(in.batch.micro_batch) + ", " +
       element_type_name(in.batch.dtype) + "\n";
  s += describe_architecture(in.model);
  s += "machine: " + std::to_string(in.machine.nodes) + " nodes x " + std::to_string(in.machine.tasks_per_node) +
       " GPUs; peak " + format_number("%.3g", in.machine.peak_flops) + " FLOP/s x efficiency " +
       format_number("%.2f", in.machine.compute_efficiency) + "; links intra " +
       format_number("%.3g", in.machine.intra_node.bandwidth_bytes_per_s) + " B/s, inter " +
       format_number("%.3g", in.machine.inter_node.bandwidth_bytes_per_s) + " B/s\n";
  s +=
      "cost model: step = compute + sum over collectives of calls*ring_steps*alpha + bus_factor*bytes/beta\n"
      "  (a call within the sizes calibrate swept on groups of its size: calls*the sweep's time there)\n"
      "  - hidden, beta and alpha of the slowest link the group spans; hidden: the overlapped collectives'\n"
      "  time (z gathers and reduce-scatters, x and y all-reduces of dX in the backward, data and\n"
      "  expert_data buckets but block 0's) times the tier's overlap fraction at its size (site\n"
      "  network.<tier>.overlap, 0 where not set), at most the compute beside them (a dX all-reduce's:\n"
      "  its layer's dW GEMM); - filled: the blocking collectives' time times their tier's time-sharing fraction (site\n"
      "  network.<tier>.filled_by_others, where ranks outnumber a node's cores; 0 where not set); hidden\n"
      "  and filled together at most the collectives' time less every call's time times its tier's\n"
      "  cores_busy (the cores its own ranks keep busy; 0 where not set)\n";
  s += describe_calibration(in.machine);
  s.append("  bytes per element: ").append(describe_collective_types(in.batch.dtype)).append("\n");
  s += std::string("  recompute: ") +
       (in.recompute ? std::string("training.recompute = ") + recompute_name(*in.recompute) + " for every layout"
                     : "auto: per layout the least recomputation that fits (none, then attention, then block); "
                       "it adds the recomputed forwards' FLOPs to compute and their collectives to the bytes") +
       "\n";
  s += std::string("  optimizer: ") +
       (in.shard_optimizer
            ? std::string("training.shard_optimizer = ") + (*in.shard_optimizer ? "true" : "false") +
                  " for every layout with G_data > 1"
            : "auto: per layout sharded over data only where that makes it fit, or fit with less recomputation") +
       "; sharded, each data rank keeps 1/G_data of the AdamW state (and of the float32 master weights in "
       "bfloat16), and the data all-reduce becomes a reduce-scatter and an all-gather of the updated weights: the "
       "same bytes and time in the model (the all-gather's half of the weights in bfloat16), though not hidden "
       "behind the backward as the all-reduce is\n\n";
  if (r.fits()) {
    const Candidate& best = r.best();
    s += "best: " + format_layout_with_order(best.layout) + " (rank order fastest first: " + format_order(best.layout) +
         "), recompute " + recompute_name(best.recompute) + ", optimizer " +
         (best.shard_optimizer ? "sharded over " + std::to_string(best.layout.data) + " data ranks"
                               : std::string("unsharded")) +
         "\n";
    for (int a = 0; a < kCommAxisCount; ++a) {
      const auto ai = static_cast<size_t>(a);
      if (best.volume.group_size[ai] <= 1) continue;
      s += "  " + pad_left(comm_axis_name(static_cast<CommAxis>(a)), 5) + " groups of " +
           std::to_string(best.volume.group_size[ai]) + " over " + link_tier_name(best.cost.link[ai]) + " links: " +
           axis_time_text(best.cost, ai) + "\n";
    }
    if (best.cost.recompute_flops > 0) {
      s += "  recomputation adds " + format_number("%.3g", best.cost.recompute_flops) + " FLOP per rank per step (" +
           format_number("%.1f", 100.0 * best.cost.recompute_flops / best.cost.flops) + "% of the model's " +
           format_number("%.3g", best.cost.flops) + ")\n";
      // Recomputation only adds time, so "auto" recomputes only where a layout must to fit;
      // the fastest layout that keeps everything is what this one beat.
      const auto kept = std::find_if(r.ranked.begin(), r.ranked.end(),
                                     [](const Candidate& c) { return c.recompute == Recompute::none; });
      if (!in.recompute && kept == r.ranked.end()) s += "  no layout fits without recomputation\n";
      if (!in.recompute && kept != r.ranked.end())
        s += "  fastest without recomputation: " + format_layout_with_order(kept->layout) + ", " +
             format_number("%.3f", kept->cost.step_s() * 1e3) + " ms\n";
    }
    // Sharding is priced at the all-reduce's time, so "auto" shards only where a layout must
    // (or may recompute less for it); say what the best layout beat that keeps the state whole
    // (among these layouts at their modes: a job with training.shard_optimizer = false ranks
    // the unsharded ones at theirs).
    if (best.shard_optimizer) {
      const auto whole =
          std::find_if(r.ranked.begin(), r.ranked.end(), [](const Candidate& c) { return !c.shard_optimizer; });
      if (whole == r.ranked.end())
        s += "  no layout here keeps the optimizer unsharded\n";
      else
        s += "  fastest that keeps the optimizer unsharded here: " + format_layout_with_order(whole->layout) + ", " +
             format_number("%.3f", whole->cost.step_s() * 1e3) + " ms, recompute " + recompute_name(whole->recompute) +
             "\n";
    }
    s += '\n';
    s += memory_formula(in, best.layout);
    const MemoryModes best_modes = resolved_modes(in, best.layout);
    if (const std::string rounds = moe_chunks_reason(in, best.layout, best_modes); !rounds.empty())
      s += "  " + rounds + "\n";
    if (const std::string chunks = tp_chunks_reason(in, best.layout, best_modes); !chunks.empty())
      s += "  " + chunks + "\n";
    s += '\n';
    const size_t n = std::min(r.ranked.size(), static_cast<size_t>(std::max(top_k, 1)));
    if (in.model.moe()) s += explain_expert_placement(r, n) + "\n";
    if (n > 1) s += "runner-ups:\n";
    for (size_t i = 1; i < n; ++i)
      s += "  " + format_layout_with_order(r.ranked[i].layout) + ": " + r.ranked[i].why_lost + "\n";
  }
  if (!r.rejected.empty()) {
    s.append("rejected (").append(std::to_string(r.rejected.size())).append(" size tuples, every axis order each):\n");
    // Sorted by reason, then numerically: each reason's layouts are adjacent.
    for (size_t first = 0, end = 0; first < r.rejected.size(); first = end) {
      const std::string& reason = r.rejected[first].reason;
      while (end < r.rejected.size() && r.rejected[end].reason == reason) ++end;
      s.append("  ").append(reason).append(": ");
      for (size_t i = first; i < end && i < first + 12; ++i)
        s.append(i > first ? ", " : "").append(format_layout(r.rejected[i].layout));
      if (end - first > 12) s.append(", ... (").append(std::to_string(end - first)).append(" in all)");
      s.push_back('\n');
    }
  }
  return s;
}

}  // namespace axonn
