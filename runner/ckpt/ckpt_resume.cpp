#include "runner/ckpt/ckpt_resume.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <map>

#include "checkpoint/checkpoint_error.hpp"
#include "trainer/model/parameters.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn {
namespace {

// The prefixes TrainingCheckpoint stores the AdamW moments under ("adam.m/wte", ...).
const char* const kStatePrefixes[] = {"", "adam.m/", "adam.v/"};

}  // namespace

ModelShape parse_model_config(const std::string& text, const std::string& file) {
  const std::string where = file + ": model_config '" + text + "'";
  ModelShape model;
  std::map<std::string, int*> fields = {{"layers", &model.layers},
                                        {"hidden", &model.hidden},
                                        {"heads", &model.heads},
                                        {"vocab", &model.vocab},
                                        {"sequence", &model.sequence},
                                        {"experts", &model.experts},
                                        {"top_k", &model.top_k},
                                        {"moe_every", &model.moe_every}};
  // An MoE model's keys come all three or not at all (a dense model's text has none).
  const char* const moe_keys[] = {"experts", "top_k", "moe_every"};
  std::map<std::string, bool> seen;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    const std::string token = text.substr(pos, end - pos);
    const size_t eq = token.find('=');
    if (token.empty() || eq == std::string::npos)
      throw FormatError(
          file, "parse model config",
          where + ": token '" + token + "' is not key=value; expected " + model_config_text(ModelShape{}));
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    const auto field = fields.find(key);
    if (field == fields.end())
      throw FormatError(file, "parse model config",
                        where + ": unknown key '" + key +
                            "'; this axonn knows layers, hidden, heads, vocab, sequence, and for an MoE model experts, "
                            "top_k, moe_every");
    if (seen[key]) throw FormatError(file, "parse model config", where + ": key '" + key + "' appears twice");
    seen[key] = true;
    int parsed = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (ec != std::errc() || ptr != value.data() + value.size() || parsed <= 0)
      throw FormatError(file, "parse model config",
                        where + ": " + key + " = '" + value + "' is not a positive integer");
    *field->second = parsed;
    pos = end + 1;
  }
  const bool moe = seen["experts"] || seen["top_k"] || seen["moe_every"];
  for (const auto& [key, unused] : fields) {
    const bool moe_key = std::find(std::begin(moe_keys), std::end(moe_keys), key) != std::end(moe_keys);
    if (!seen[key] && (!moe_key || moe))
      throw FormatError(file, "parse model config", where + ": key '" + key + "' is missing");
  }
  // Same keys and values, but spelled otherwise ("hidden=064", another order, two spaces):
  // not written by this trainer, and the trainer compares the text itself on resume.
  if (model_config_text(model) != text)
    throw FormatError(file, "parse model config",
                      where + " is not in the trainer's form '" + model_config_text(model) +
                          "'; axonn train would refuse to resume it");
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
