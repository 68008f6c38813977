#include "runner/ckpt/ckpt_resume.hpp"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <iterator>
#include <map>
#include <utility>

#include "checkpoint/checkpoint_error.hpp"
#include "trainer/model/parameters.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn {
namespace {

// The prefixes TrainingCheckpoint stores the AdamW moments under ("adam.m/wte", ...).
const char* const kStatePrefixes[] = {"", "adam.m/", "adam.v/"};

}  // namespace

namespace {

// The keys a model_config text may hold: the shape's, the architecture's where it is not
// GPT-2's, and an MoE model's (model_config_text writes them in this order).
constexpr const char* kShapeKeys[] = {"layers", "hidden", "heads", "vocab", "sequence"};
constexpr const char* kOptionalKeys[] = {"norm", "norm_eps",  "mlp",  "mlp_hidden",     "positions", "rope_theta",
                                         "rope_scaling", "kv_heads", "bias", "tie_embeddings", "experts",
                                         "top_k",        "moe_every"};

}  // namespace

ModelShape parse_model_config(const std::string& text, const std::string& file) {
  const std::string where = file + ": model_config '" + text + "'";
  auto bad = [&](const std::string& what) { return FormatError(file, "parse model config", where + ": " + what); };
  std::map<std::string, std::string> values;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    const std::string token = text.substr(pos, end - pos);
    const size_t eq = token.find('=');
    if (token.empty() || eq == std::string::npos)
      throw bad("token '" + token + "' is not key=value; expected " + model_config_text(ModelShape{}));
    const std::string key = token.substr(0, eq);
    const bool known = std::find(std::begin(kShapeKeys), std::end(kShapeKeys), key) != std::end(kShapeKeys) ||
                       std::find(std::begin(kOptionalKeys), std::end(kOptionalKeys), key) != std::end(kOptionalKeys);
    if (!known)
      throw bad("unknown key '" + key +
                "'; this axonn knows layers, hidden, heads, vocab, sequence, the architecture's norm, norm_eps, mlp, "
                "mlp_hidden, positions, rope_theta, rope_scaling, kv_heads, bias, tie_embeddings, and for an MoE "
                "model experts, top_k, moe_every");
    if (!values.emplace(key, token.substr(eq + 1)).second) throw bad("key '" + key + "' appears twice");
    pos = end + 1;
  }
  auto integer = [&](const std::string& key, int& field) {
    const auto it = values.find(key);
    if (it == values.end()) return false;
    const std::string& value = it->second;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), field);
    if (ec != std::errc() || ptr != value.data() + value.size() || field <= 0)
      throw bad(key + " = '" + value + "' is not a positive integer");
    return true;
  };
  auto number = [&](const std::string& value, const std::string& key) {
    double parsed = 0.0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (ec != std::errc() || ptr != value.data() + value.size() || !(parsed > 0.0))
      throw bad(key + " = '" + value + "' is not a positive number");
    return parsed;
  };
  auto word = [&](const std::string& key, std::initializer_list<const char*> allowed) -> std::string {
    const auto it = values.find(key);
    if (it == values.end()) return "";
    for (const char* a : allowed)
      if (it->second == a) return it->second;
    throw bad(key + " = '" + it->second + "' is not one this axonn knows");
  };
  ModelShape model;
  for (const auto& [key, field] : {std::pair{"layers", &model.layers}, std::pair{"hidden", &model.hidden},
                                   std::pair{"heads", &model.heads}, std::pair{"vocab", &model.vocab},
                                   std::pair{"sequence", &model.sequence}})
    if (!integer(key, *field)) throw bad("key '" + std::string(key) + "' is missing");
  if (word("norm", {"rmsnorm"}) == "rmsnorm") model.norm = Norm::rmsnorm;
  if (values.count("norm_eps")) model.norm_eps = number(values["norm_eps"], "norm_eps");
  if (word("mlp", {"swiglu"}) == "swiglu") model.mlp = Mlp::swiglu;
  integer("mlp_hidden", model.mlp_hidden);
  if (word("positions", {"rope"}) == "rope") model.positions = Positions::rope;
  if (values.count("rope_theta")) model.rope_theta = number(values["rope_theta"], "rope_theta");
  if (values.count("rope_scaling")) {
    // llama3:<factor>:<low_freq_factor>:<high_freq_factor>:<original positions>
    std::vector<std::string> parts;
    std::string rest = values["rope_scaling"];
    for (size_t colon; (colon = rest.find(':')) != std::string::npos; rest = rest.substr(colon + 1))
      parts.push_back(rest.substr(0, colon));
    parts.push_back(rest);
    if (parts.size() != 5 || parts[0] != "llama3")
      throw bad("rope_scaling = '" + values["rope_scaling"] + "' is not llama3:FACTOR:LOW:HIGH:POSITIONS");
    RopeScaling r;
    r.factor = number(parts[1], "rope_scaling factor");
    r.low_freq_factor = number(parts[2], "rope_scaling low_freq_factor");
    r.high_freq_factor = number(parts[3], "rope_scaling high_freq_factor");
    r.original_positions = static_cast<int>(number(parts[4], "rope_scaling original positions"));
    model.rope_scaling = r;
  }
  integer("kv_heads", model.kv_heads);
  if (word("bias", {"false"}) == "false") model.bias = false;
  if (word("tie_embeddings", {"false"}) == "false") model.tie_embeddings = false;
  // An MoE model's keys come all three or not at all (a dense model's text has none).
  const bool moe = values.count("experts") || values.count("top_k") || values.count("moe_every");
  for (const auto& [key, field] : {std::pair{"experts", &model.experts}, std::pair{"top_k", &model.top_k},
                                   std::pair{"moe_every", &model.moe_every}})
    if (!integer(key, *field) && moe) throw bad("key '" + std::string(key) + "' is missing");
  if (model.heads <= 0 || model.hidden % model.heads != 0 || model.heads % model.kv() != 0)
    throw bad("heads must divide hidden, and kv_heads heads");
  // Same keys and values, but spelled otherwise ("hidden=064", another order, two spaces, a
  // GPT-2 default written out): not written by this trainer, which compares the text itself on resume.
  if (model_config_text(model) != text)
    throw bad("not in the trainer's form '" + model_config_text(model) + "'; axonn train would refuse to resume it");
  return model;
}

void check_model_tensors(const std::vector<TensorInfo>& table, const ModelShape& model, const std::string& file) {
  for (const ParamSpec& spec : gpt_parameters(model)) {
    for (const char* prefix : kStatePrefixes) {
      const std::string name = prefix + spec.name;
      const TensorInfo& info = find_tensor(table, name, file);
      if (info.global_shape != spec.shape)
        throw RequestMismatch(file, "plan",
                              file + ": tensor '" + name + "' has shape " + shape_string(info.global_shape) +
                                  ", but the model_config (" + model_config_text(model) + ") gives it " +
                                  shape_string(spec.shape) + "; the checkpoint is inconsistent");
    }
  }
}

std::vector<std::vector<RectRequest>> resume_requests(const ModelShape& model, const Layout& layout,
                                                      bool shard_optimizer) {
  std::vector<std::vector<RectRequest>> per_rank(static_cast<size_t>(layout.world()));
  for (int r = 0; r < layout.world(); ++r) {
    const Coords at = layout.coords(r);
    const ParameterLayout params = parameter_layout(model, layout, at, shard_optimizer);
    std::vector<RectRequest>& requests = per_rank[static_cast<size_t>(r)];
    for (const StateSlice& s : state_slices(params, optimizer_state_runs(params, at.data)))
      requests.push_back({s.name, s.rect});
  }
  return per_rank;
}

}  // namespace axonn
