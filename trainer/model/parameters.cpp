#include "trainer/model/parameters.hpp"

#include <cmath>
#include <stdexcept>

namespace axonn {
namespace {

std::string axes_text(const std::vector<Axis>& axes) {
  std::string s;
  for (Axis a : axes) s += (s.empty() ? "G_" : "*G_") + axis_name(a);
  return s;
}

}  // namespace

std::vector<ParamSpec> gpt_parameters(const ModelShape& m) {
  const int64_t C = m.hidden, V = m.vocab, T = m.sequence;
  const Axis x = Axis::x, y = Axis::y, z = Axis::z;
  // GPT-2 / nanoGPT initialization: N(0, 0.02), the residual projections scaled by
  // 1/sqrt(2L), biases 0, LayerNorm gain 1.
  const float std_weight = 0.02f;
  const float std_residual = 0.02f / std::sqrt(2.0f * static_cast<float>(m.layers));

  std::vector<ParamSpec> sharded, small_decayed, small;
  sharded.push_back({"wte", {V, C}, {{y}, {x, z}}, ParamGroup::sharded, true, ParamInit::normal, std_weight});
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    sharded.push_back({p + "attn.qkv.weight",
                       {C, 3, C},
                       {{x, z}, {}, {y}},
                       ParamGroup::sharded,
                       true,
                       ParamInit::normal,
                       std_weight});
    sharded.push_back(
        {p + "attn.proj.weight", {C, C}, {{y, z}, {x}}, ParamGroup::sharded, true, ParamInit::normal, std_residual});
    sharded.push_back(
        {p + "mlp.fc.weight", {C, 4 * C}, {{x, z}, {y}}, ParamGroup::sharded, true, ParamInit::normal, std_weight});
    sharded.push_back(
        {p + "mlp.proj.weight", {4 * C, C}, {{y, z}, {x}}, ParamGroup::sharded, true, ParamInit::normal, std_residual});

    auto ln = [&](const std::string& name) {
      small.push_back({p + name + ".weight", {C}, {{x}}, ParamGroup::small, false, ParamInit::ones, 0.0f});
      small.push_back({p + name + ".bias", {C}, {{x}}, ParamGroup::small, false, ParamInit::zeros, 0.0f});
    };
    ln("ln1");
    small.push_back({p + "attn.qkv.bias", {3, C}, {{}, {y}}, ParamGroup::small, false, ParamInit::zeros, 0.0f});
    small.push_back({p + "attn.proj.bias", {C}, {{x}}, ParamGroup::small, false, ParamInit::zeros, 0.0f});
    ln("ln2");
    small.push_back({p + "mlp.fc.bias", {4 * C}, {{y}}, ParamGroup::small, false, ParamInit::zeros, 0.0f});
    small.push_back({p + "mlp.proj.bias", {C}, {{x}}, ParamGroup::small, false, ParamInit::zeros, 0.0f});
  }
  small_decayed.push_back({"wpe", {T, C}, {{}, {x}}, ParamGroup::small, true, ParamInit::normal, std_weight});
  small.push_back({"ln_f.weight", {C}, {{x}}, ParamGroup::small, false, ParamInit::ones, 0.0f});
  small.push_back({"ln_f.bias", {C}, {{x}}, ParamGroup::small, false, ParamInit::zeros, 0.0f});

  std::vector<ParamSpec> all = std::move(sharded);
  all.insert(all.end(), small_decayed.begin(), small_decayed.end());
  all.insert(all.end(), small.begin(), small.end());
  return all;
}

Rect shard_rect(const ParamSpec& spec, const Layout& layout, const Coords& coords) {
  Rect r;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    int64_t ways = 1, block = 0;
    for (Axis a : spec.split[d]) {
      ways *= layout.size(a);
      block = block * layout.size(a) + coords[a];
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

std::vector<Axis> replica_axes(const ParamSpec& spec) {
  std::vector<Axis> out;
  for (Axis a : kAllAxes) {
    bool used = false;
    for (const auto& dim : spec.split)
      for (Axis s : dim) used |= s == a;
    if (!used) out.push_back(a);
  }
  return out;
}

const ParamSlot& ParameterLayout::slot(const std::string& name) const {
  for (const auto& s : slots)
    if (s.spec.name == name) return s;
  throw std::out_of_range("no parameter named '" + name + "'");
}

ParameterLayout parameter_layout(const ModelShape& model, const Layout& layout, const Coords& coords) {
  ParameterLayout pl;
  for (auto& spec : gpt_parameters(model)) {
    ParamSlot s;
    s.rect = shard_rect(spec, layout, coords);
    s.count = element_count(s.rect);
    s.offset = pl.total;
    pl.total += s.count;
    if (spec.group == ParamGroup::sharded) pl.sharded = pl.total;
    if (spec.decay) pl.decayed = pl.total;
    s.spec = std::move(spec);
    pl.slots.push_back(std::move(s));
  }
  return pl;
}

}  // namespace axonn
