#include "trainer/model/parameters.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "layout/model_plan.hpp"

namespace axonn {
namespace {

std::string axes_text(const std::vector<Axis>& axes) {
  std::string s;
  for (Axis a : axes) s += (s.empty() ? "G_" : "*G_") + axis_name(a);
  return s;
}

}  // namespace

std::vector<ParamSpec> gpt_parameters(const ModelShape& m) {
  const int64_t C = m.hidden, V = m.vocab, T = m.sequence, F = m.ffn();
  const Axis x = Axis::x, y = Axis::y, z = Axis::z, expert = Axis::expert;
  // GPT-2 / nanoGPT initialization: N(0, 0.02), the residual projections scaled by
  // 1/sqrt(2L), biases 0, normalization gains 1.
  const float std_weight = 0.02f;
  const float std_residual = 0.02f / std::sqrt(2.0f * static_cast<float>(m.layers));
  auto weight = [](std::string name, std::vector<int64_t> shape, std::vector<std::vector<Axis>> split, float std) {
    return ParamSpec{std::move(name), std::move(shape), std::move(split), ParamGroup::sharded, true,
                     ParamInit::normal, std};
  };
  auto small_zeros = [](std::string name, std::vector<int64_t> shape, std::vector<std::vector<Axis>> split) {
    return ParamSpec{std::move(name), std::move(shape), std::move(split), ParamGroup::small, false, ParamInit::zeros,
                     0.0f};
  };
  // qkv: GPT-2's [C, 3, C] (q | k | v, each split over y), or grouped-query attention's
  // [C, KV, H/KV + 2, d]: per key/value head its group's query heads, then its k and v, the
  // groups split over y (docs/parallel-plan.md, "Grouped-query attention"). Its bias is its
  // shape without the rows.
  struct Shaped {
    std::vector<int64_t> shape;
    std::vector<std::vector<Axis>> split;
  };
  const int64_t KV = m.kv(), group = m.heads / KV + 2, d = m.head_dim();
  const Shaped qkv = m.grouped_attention() ? Shaped{{C, KV, group, d}, {{x, z}, {y}, {}, {}}}
                                           : Shaped{{C, 3, C}, {{x, z}, {}, {y}}};
  const Shaped qkv_bias = m.grouped_attention() ? Shaped{{KV, group, d}, {{y}, {}, {}}} : Shaped{{3, C}, {{}, {y}}};
  // mlp.fc: [C, F], or SwiGLU's [C, 2, F] (gate | up, each split over y, so a rank's gate and
  // up columns are the same F/G_y units).
  const bool swiglu = m.mlp == Mlp::swiglu;
  const Shaped fc = swiglu ? Shaped{{C, 2, F}, {{x, z}, {}, {y}}} : Shaped{{C, F}, {{x, z}, {y}}};
  const Shaped fc_bias = swiglu ? Shaped{{2, F}, {{}, {y}}} : Shaped{{F}, {{y}}};
  // An MoE block's experts' tensor of shape `s` each: [E, s...], the experts split over the
  // expert axis (Mixtral's experts are SwiGLU MLPs like its dense ones).
  auto per_expert = [&](const Shaped& s) {
    Shaped out{{m.experts}, {{expert}}};
    out.shape.insert(out.shape.end(), s.shape.begin(), s.shape.end());
    out.split.insert(out.split.end(), s.split.begin(), s.split.end());
    return out;
  };

  std::vector<ParamSpec> sharded, small_decayed, small, expert_small;
  sharded.push_back(weight("wte", {V, C}, {{y}, {x, z}}, std_weight));
  if (!m.tie_embeddings) sharded.push_back(weight("lm_head.weight", {V, C}, {{y}, {x, z}}, std_weight));
  auto norm = [&](const std::string& name) {
    small.push_back({name + ".weight", {C}, {{x}}, ParamGroup::small, false, ParamInit::ones, 0.0f});
    if (m.norm == Norm::layernorm && m.bias) small.push_back(small_zeros(name + ".bias", {C}, {{x}}));
  };
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    sharded.push_back(weight(p + "attn.qkv.weight", qkv.shape, qkv.split, std_weight));
    sharded.push_back(weight(p + "attn.proj.weight", {C, C}, {{y, z}, {x}}, std_residual));
    const bool moe = m.is_moe_block(l);
    const int64_t E = m.experts;
    if (moe) {  // each expert's fc and proj sharded as the dense MLP's, one [E, ...] tensor each
      const Shaped experts_fc = per_expert(fc);
      sharded.push_back(weight(p + "mlp.experts.fc.weight", experts_fc.shape, experts_fc.split, std_weight));
      sharded.push_back(weight(p + "mlp.experts.proj.weight", {E, F, C}, {{expert}, {y, z}, {x}}, std_residual));
      small_decayed.push_back(
          {p + "mlp.router.weight", {C, E}, {{x}, {}}, ParamGroup::small, true, ParamInit::normal, std_weight});
    } else {
      sharded.push_back(weight(p + "mlp.fc.weight", fc.shape, fc.split, std_weight));
      sharded.push_back(weight(p + "mlp.proj.weight", {F, C}, {{y, z}, {x}}, std_residual));
    }

    norm(p + "ln1");
    if (m.bias) {
      small.push_back(small_zeros(p + "attn.qkv.bias", qkv_bias.shape, qkv_bias.split));
      small.push_back(small_zeros(p + "attn.proj.bias", {C}, {{x}}));
    }
    norm(p + "ln2");
    if (m.bias && moe) {
      const Shaped experts_fc_bias = per_expert(fc_bias);
      expert_small.push_back(small_zeros(p + "mlp.experts.fc.bias", experts_fc_bias.shape, experts_fc_bias.split));
      expert_small.push_back(small_zeros(p + "mlp.experts.proj.bias", {E, C}, {{expert}, {x}}));
    } else if (m.bias) {
      small.push_back(small_zeros(p + "mlp.fc.bias", fc_bias.shape, fc_bias.split));
      small.push_back(small_zeros(p + "mlp.proj.bias", {C}, {{x}}));
    }
  }
  if (m.positions == Positions::learned)
    small_decayed.push_back({"wpe", {T, C}, {{}, {x}}, ParamGroup::small, true, ParamInit::normal, std_weight});
  norm("ln_f");

  std::vector<ParamSpec> all = std::move(sharded);
  all.insert(all.end(), small_decayed.begin(), small_decayed.end());
  all.insert(all.end(), small.begin(), small.end());
  all.insert(all.end(), expert_small.begin(), expert_small.end());
  return all;
}

Rect shard_rect(const ParamSpec& spec, const Layout& layout, const Coords& coords) {
  Rect r;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    int64_t ways = 1, block = 0;
    for (Axis a : spec.split[d]) {
      ways *= layout.size(a);
      block = block * layout.size(a) + layout.coordinate(coords, a);
    }
    if (spec.shape[d] % ways != 0)
      throw LayoutError(spec.name + ": dimension " + std::to_string(d) + " (" + std::to_string(spec.shape[d]) +
                        ") is not divisible by " + axes_text(spec.split[d]) + "=" + std::to_string(ways) +
                        " in layout " + format_layout(layout));
    const int64_t extent = spec.shape[d] / ways;
    r.offset.push_back(block * extent);
    r.count.push_back(extent);
  }
  return r;
}

bool splits_over(const ParamSpec& spec, Axis axis) {
  for (const auto& dim : spec.split)
    for (Axis a : dim)
      if (a == axis) return true;
  return false;
}

std::vector<Axis> replica_axes(const ParamSpec& spec) {
  std::vector<Axis> out;
  for (Axis a : kAllAxes) {
    if (splits_over(spec, a)) continue;
    // Split over the expert ranks, a tensor is copied only among the data coordinates that
    // hold the same experts.
    out.push_back(a == Axis::data && splits_over(spec, Axis::expert) ? Axis::expert_data : a);
  }
  return out;
}

const ParamSlot& ParameterLayout::slot(const std::string& name) const {
  for (const auto& s : slots)
    if (s.spec.name == name) return s;
  throw std::out_of_range("no parameter named '" + name + "'");
}

bool ParameterLayout::has(const std::string& name) const {
  return std::any_of(slots.begin(), slots.end(), [&](const ParamSlot& s) { return s.spec.name == name; });
}

namespace {

// The bucket a tensor's gradient is synchronized in: "wte", "h.<l>" for a block's weights,
// "h.<l>.experts" for an MoE block's experts' weights, "small.experts" for the experts'
// biases, "small" for the rest (gradient_sync.hpp).
std::string bucket_of(const ParamSpec& spec) {
  const bool expert = splits_over(spec, Axis::expert);
  if (spec.group == ParamGroup::small) return expert ? "small.experts" : "small";
  if (spec.name == "wte" || spec.name == "lm_head.weight") return "wte";  // the embeddings, tied or not
  const std::string block = spec.name.substr(0, spec.name.find('.', 2));  // "h.12.attn.qkv.weight" -> "h.12"
  return expert ? block + ".experts" : block;
}

}  // namespace

const ParamBucket& ParameterLayout::bucket(const std::string& name) const {
  for (const auto& b : buckets)
    if (b.name == name) return b;
  throw std::out_of_range("no parameter bucket named '" + name + "'");
}

ParameterLayout parameter_layout(const ModelShape& model, const Layout& layout, const Coords& coords,
                                 bool shard_optimizer) {
  ParameterLayout pl;
  pl.pieces = shards_optimizer(layout, shard_optimizer) ? layout.data : 1;
  auto close_bucket = [&] {
    ParamBucket& b = pl.buckets.back();
    b.padded = padded_bucket(b.count, pl.pieces);
    pl.total = b.offset + b.padded;
  };
  for (auto& spec : gpt_parameters(model)) {
    const std::string bucket = bucket_of(spec);
    if (pl.buckets.empty() || pl.buckets.back().name != bucket) {
      if (!pl.buckets.empty()) close_bucket();
      if (spec.group == ParamGroup::small && pl.sharded == 0) pl.sharded = pl.total;
      pl.buckets.push_back({bucket, pl.total, 0, 0});
    }
    ParamSlot s;
    s.rect = shard_rect(spec, layout, coords);
    s.count = element_count(s.rect);
    s.offset = pl.buckets.back().offset + pl.buckets.back().count;
    pl.buckets.back().count += s.count;
    if (spec.decay) pl.decayed = s.offset + s.count;
    s.spec = std::move(spec);
    pl.slots.push_back(std::move(s));
  }
  close_bucket();
  return pl;
}

std::vector<StateRun> optimizer_state_runs(const ParameterLayout& layout, int data_rank) {
  if (layout.pieces == 1) return {{0, 0, layout.total}};
  std::vector<StateRun> runs;
  int64_t state = 0;
  for (const ParamBucket& b : layout.buckets) {
    const int64_t piece = b.piece(layout.pieces);
    runs.push_back({b.offset + data_rank * piece, state, piece});
    state += piece;
  }
  return runs;
}

std::vector<StateSlice> state_slices(const ParameterLayout& layout, const std::vector<StateRun>& runs,
                                     bool master_pieces) {
  std::vector<StateSlice> out;
  const bool split = layout.pieces > 1;
  // The parts of `slot` that the runs cover, from `buffer` at the runs' state offsets.
  auto pieces = [&](const std::string& name, const ParamSlot& slot, StateBuffer buffer) {
    for (const StateRun& run : runs) {
      const int64_t begin = std::max(slot.offset, run.offset);
      const int64_t end = std::min(slot.offset + slot.count, run.offset + run.count);
      if (begin >= end) continue;
      for (const FlatRect& f : flat_range_rects(slot.rect, begin - slot.offset, end - slot.offset))
        out.push_back({name, &slot, f.rect, buffer, run.state_offset + (slot.offset + f.begin - run.offset), split});
    }
  };
  for (const ParamSlot& slot : layout.slots) {
    if (master_pieces && split && slot.offset < layout.sharded)
      pieces(slot.spec.name, slot, StateBuffer::master);
    else
      out.push_back({slot.spec.name, &slot, slot.rect, StateBuffer::params, slot.offset, false});
  }
  const std::pair<const char*, StateBuffer> moments[] = {{"adam.m/", StateBuffer::adam_m},
                                                         {"adam.v/", StateBuffer::adam_v}};
  for (const auto& [prefix, buffer] : moments)
    for (const ParamSlot& slot : layout.slots) pieces(prefix + slot.spec.name, slot, buffer);
  return out;
}

}  // namespace axonn
