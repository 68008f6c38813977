#include "runner/ckpt/export_names.hpp"

#include <cctype>
#include <optional>
#include <set>

#include "checkpoint/checkpoint_error.hpp"
#include "runner/cli/args.hpp"

namespace axonn {
namespace {

// "h.<l>.<rest>" split into its block number and rest; nullopt for any other name (the
// AdamW moments "adam.m/h.<l>...." among them).
struct BlockTensor {
  std::string layer;  // the digits, as written
  std::string rest;   // "mlp.router.weight"
};

std::optional<BlockTensor> block_tensor(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return std::nullopt;
  size_t end = 2;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == 2 || end >= name.size() || name[end] != '.') return std::nullopt;
  return BlockTensor{name.substr(2, end - 2), name.substr(end + 1)};
}

// What each MoE tensor becomes: its Mixtral name inside experts.<e>, the rank axonn stores it
// with, and whether the file holds it transposed.
struct ExpertTensor {
  const char* axonn;  // after "h.<l>."
  const char* mixtral;
  size_t rank;
  bool transpose;
};
constexpr ExpertTensor kExpertTensors[] = {
    {"mlp.experts.fc.weight", "w1.weight", 3, true},    // [E, C, 4C] -> E x [4C, C]
    {"mlp.experts.fc.bias", "w1.bias", 2, false},       // [E, 4C]    -> E x [4C]
    {"mlp.experts.proj.weight", "w2.weight", 3, true},  // [E, 4C, C] -> E x [C, 4C]
    {"mlp.experts.proj.bias", "w2.bias", 2, false},     // [E, C]     -> E x [C]
};
constexpr const char* kRouter = "mlp.router.weight";  // [C, E] -> gate.weight [E, C]

[[noreturn]] void bad_rank(const TensorInfo& t, size_t rank) {
  std::string message = "tensor ";
  message.append(t.name)
      .append(" has shape ")
      .append(shape_string(t.global_shape))
      .append("; an MoE block's ")
      .append(std::to_string(rank))
      .append(
          "-D tensor was expected (docs/moe.md), so it cannot be exported under Mixtral names; export it with "
          "--names axonn");
  throw FormatError("", "export --names mixtral", message);
}

}  // namespace

ExportNames parse_export_names(const std::string& value) {
  if (value == "axonn") return ExportNames::axonn;
  if (value == "mixtral") return ExportNames::mixtral;
  std::string message = "unknown --names ";
  message.append(value).append(
      "; use --names axonn (every tensor under its axonn name, the default) or --names mixtral (MoE routers and "
      "experts under Hugging Face MixtralForCausalLM names)");
  throw UsageError(message);
}

NamedExport export_entries(const std::vector<TensorInfo>& tensors, ExportNames names) {
  NamedExport out;
  std::set<std::string> renamed_blocks;
  for (const TensorInfo& t : tensors) {
    const std::optional<BlockTensor> block = names == ExportNames::mixtral ? block_tensor(t.name) : std::nullopt;
    const ExpertTensor* expert = nullptr;
    for (const ExpertTensor& candidate : kExpertTensors)
      if (block && block->rest == candidate.axonn) expert = &candidate;
    const bool router = block && block->rest == kRouter;
    if (!router && !expert) {
      out.entries.push_back(whole_tensor(t));
      continue;
    }
    std::string prefix = "model.layers.";
    prefix.append(block->layer).append(".block_sparse_moe.");
    renamed_blocks.insert(block->layer);
    if (router) {
      if (t.global_shape.size() != 2) bad_rank(t, 2);
      ExportTensor gate = whole_tensor(t);
      gate.name = prefix + "gate.weight";
      gate.transpose = true;
      out.entries.push_back(std::move(gate));
      continue;
    }
    // SwiGLU experts hold fc as [E, C, 2, F] (gate | up) and its bias as [E, 2, F]: one more
    // dimension, whose two halves are Mixtral's w1 (gate) and w3 (up).
    const bool fc = block->rest.rfind("mlp.experts.fc.", 0) == 0;
    const bool gated = fc && t.global_shape.size() == expert->rank + 1 && t.global_shape[t.global_shape.size() - 2] == 2;
    if (t.global_shape.size() != expert->rank && !gated) bad_rank(t, expert->rank);
    const size_t half_dim = t.global_shape.size() - 2;
    for (int64_t e = 0; e < t.global_shape[0]; ++e) {
      for (int half = 0; half < (gated ? 2 : 1); ++half) {
        ExportTensor slab = whole_tensor(t);  // narrowed to expert e: [1, ...] of [E, ...]
        slab.slab.offset[0] = e;
        slab.slab.count[0] = 1;
        if (gated) {  // and to its gate or up half: [1, C, 1, F]
          slab.slab.offset[half_dim] = half;
          slab.slab.count[half_dim] = 1;
        }
        slab.drop_leading = gated && !expert->transpose ? 2 : 1;  // the bias's [1, 1, F] is [F]
        slab.transpose = expert->transpose;
        std::string name = expert->mixtral;
        if (half == 1) name.replace(0, 2, "w3");  // "w1.weight" -> "w3.weight"
        slab.name = prefix;
        slab.name.append("experts.").append(std::to_string(e)).append(".").append(name);
        out.entries.push_back(std::move(slab));
      }
    }
  }
  out.moe_blocks_renamed = static_cast<int>(renamed_blocks.size());
  return out;
}

}  // namespace axonn
