#include "runner/hf/hf_config.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

#include "config/config_error.hpp"
#include "core/json_reader.hpp"
#include "core/json_text.hpp"

namespace axonn {
namespace {

// The largest extent config/job_config.cpp accepts for a model dimension.
constexpr int64_t kMaxDim = int64_t{1} << 24;

// A double as config.json writes it: an integral value as "500000.0" (a float to Python,
// where LlamaConfig expects one), else in the fewest digits that read back as it ("1e-05").
std::string float_text(double v) {
  if (std::abs(v) < 1e15 && v == std::trunc(v)) return std::to_string(static_cast<int64_t>(v)) + ".0";
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// A JSON value as a message quotes it: strings quoted, numbers as written, containers by kind.
std::string value_text(const JsonValue& v) {
  switch (v.type()) {
    case JsonValue::Type::null:
      return "null";
    case JsonValue::Type::boolean:
      return v.boolean() ? "true" : "false";
    case JsonValue::Type::number: {
      const double n = v.number();
      if (std::abs(n) < 1e15 && n == std::trunc(n)) return std::to_string(static_cast<int64_t>(n));
      return float_text(n);
    }
    case JsonValue::Type::string:
      return json_string(v.string());
    default:
      return v.type_name();
  }
}

// Keys that do not change the weights or the math of a forward pass: accepted, not kept.
// Token ids belong to the tokenizer; dropout and initialization to training; pretraining_tp
// only splits Llama 2's GEMMs; max_window_layers means nothing without a sliding window.
const std::set<std::string> kIgnoredKeys = {
    "_name_or_path",     "transformers_version", "torch_dtype",       "dtype",
    "bos_token_id",      "eos_token_id",         "pad_token_id",      "initializer_range",
    "use_cache",         "pretraining_tp",       "attention_dropout", "max_window_layers",
    "output_attentions", "output_hidden_states", "return_dict",       "tokenizer_class"};

// Reads config.json's keys, each once, and names the file, key and value in every error.
class HfReader {
 public:
  // prefix: "" for config.json's top level, "rope_scaling." for that object's keys.
  HfReader(const JsonValue& root, std::string file, std::string prefix = "")
      : root_(root), file_(std::move(file)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& value, const std::string& why) const {
    throw ConfigError(file_ + ": " + prefix_ + key + " = " + value + " " + why);
  }
  [[noreturn]] void fail(const std::string& key, const JsonValue& value, const std::string& why) const {
    fail(key, value_text(value), why);
  }
  const JsonValue* get(const std::string& key) {
    seen_.insert(key);
    return root_.find(key);
  }
  // A positive integer up to kMaxDim; `fallback` when absent (or null, where null_ok).
  int dim(const std::string& key, int fallback, bool null_ok = false) {
    const JsonValue* v = get(key);
    if (!v || (null_ok && v->is_null())) return fallback;
    const double n = v->is_number() ? v->number() : 0;
    if (!(n >= 1 && n <= static_cast<double>(kMaxDim)) || n != std::trunc(n))
      fail(key, *v, "must be an integer in [1, " + std::to_string(kMaxDim) + "]");
    return static_cast<int>(v->number());
  }
  double positive(const std::string& key, double fallback) {
    const JsonValue* v = get(key);
    if (!v) return fallback;
    if (!v->is_number() || !(v->number() > 0)) fail(key, *v, "must be a number above 0");
    return v->number();
  }
  bool boolean(const std::string& key, bool fallback) {
    const JsonValue* v = get(key);
    if (!v) return fallback;
    if (v->type() != JsonValue::Type::boolean) fail(key, *v, "must be true or false");
    return v->boolean();
  }
  std::string text(const std::string& key, const std::string& fallback) {
    const JsonValue* v = get(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, *v, "must be a string");
    return v->string();
  }
  // Every key of the file that no read asked for, nor kIgnoredKeys names: ConfigError.
  void finish() const {
    for (const auto& [key, value] : root_.object())
      if (!seen_.count(key) && !kIgnoredKeys.count(key))
        fail(key, value,
             "is a key axonn does not know, so cannot tell whether it changes the model; if it does not "
             "(a tokenizer or training setting), delete it from the file");
  }
  const std::string& file() const { return file_; }

 private:
  const JsonValue& root_;
  std::string file_;
  std::string prefix_;
  std::set<std::string> seen_;
};

const char* const kQwen2 =
    "is Qwen 2, whose q_proj, k_proj and v_proj have biases; axonn's Llama shape has none (model.bias = "
    "false drops every linear layer's), so its weights cannot be imported";

// architectures and model_type: Llama, or Mistral (the same tensors; its sliding window is
// checked apart). Qwen 2 is refused with its reason.
void read_family(HfReader& r, HfLlamaConfig& c) {
  if (const JsonValue* a = r.get("architectures")) {
    if (!a->is_array() || a->array().size() != 1 || !a->at(0).is_string())
      r.fail("architectures", *a, "must list one architecture, \"LlamaForCausalLM\"");
    c.architecture = a->at(0).string();
    if (c.architecture == "Qwen2ForCausalLM") r.fail("architectures", a->at(0), kQwen2);
    if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM")
      r.fail("architectures", a->at(0),
             "is not supported; axonn imports \"LlamaForCausalLM\" (and \"MistralForCausalLM\" "
             "without a sliding window)");
  }
  if (const JsonValue* t = r.get("model_type")) {
    c.model_type = r.text("model_type", "llama");
    if (c.model_type == "qwen2") r.fail("model_type", *t, kQwen2);
    if (c.model_type != "llama" && c.model_type != "mistral")
      r.fail("model_type", *t, "is not supported; axonn imports \"llama\" (and \"mistral\" without a sliding window)");
  }
}

// The rotary settings: rope_theta and rope_scaling, null or Llama 3.1's {"rope_type" (or
// the older "type"): "llama3", factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}, all four given. Newer transformers write both in one
// object, rope_parameters {"rope_type": "default" or "llama3", "rope_theta", ...}; where a file
// has that and the older keys too, they must agree.
struct Rotary {
  double theta = 10000.0;
  std::optional<RopeScaling> scaling;
};

// One rope_scaling (parameters = false) or rope_parameters (true) object, named `key`.
Rotary read_rotary_object(HfReader& r, const std::string& key, const JsonValue& v, bool parameters) {
  if (!v.is_object()) r.fail(key, v, parameters ? "must be an object" : "must be null or an object");
  const char* type_key = v.find("rope_type") ? "rope_type" : "type";
  const JsonValue* type = v.find(type_key);
  const std::string supported = parameters ? "\"default\" or \"llama3\"" : "\"llama3\" (Llama 3.1) or null";
  if (!type) r.fail(key, v, "has no rope_type; axonn supports " + supported);
  const bool llama3 = type->is_string() && type->string() == "llama3";
  if (!llama3 && !(parameters && type->is_string() && type->string() == "default"))
    r.fail(key + "." + type_key, *type,
           "is not supported; axonn's RoPE is the plain rule or Llama 3.1's \"llama3\" scaling (docs/llama.md), " +
               supported);
  HfReader s(v, r.file(), key + ".");
  s.get(type_key);
  Rotary out;
  auto required = [&](const std::string& field) {
    if (!s.get(field))
      r.fail(key, v, "has no " + field + "; " + (llama3 ? "the \"llama3\" rule" : "RoPE") + " needs it");
  };
  if (parameters) {
    required("rope_theta");
    out.theta = s.positive("rope_theta", 0);
  }
  if (llama3) {
    RopeScaling k;
    for (const char* field : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      required(field);
    k.factor = s.positive("factor", 0);
    k.low_freq_factor = s.positive("low_freq_factor", 0);
    k.high_freq_factor = s.positive("high_freq_factor", 0);
    k.original_positions = s.dim("original_max_position_embeddings", 0);
    if (k.high_freq_factor <= k.low_freq_factor)
      s.fail("high_freq_factor", *v.find("high_freq_factor"),
             "must be above low_freq_factor = " + float_text(k.low_freq_factor) + " (Llama 3.1: 4 and 1)");
    out.scaling = k;
  }
  s.finish();
  return out;
}

Rotary read_rotary(HfReader& r) {
  Rotary out;
  out.theta = r.positive("rope_theta", out.theta);
  if (const JsonValue* v = r.get("rope_scaling"); v && !v->is_null())
    out.scaling = read_rotary_object(r, "rope_scaling", *v, false).scaling;
  const JsonValue* p = r.get("rope_parameters");
  if (!p) return out;
  const Rotary inside = read_rotary_object(r, "rope_parameters", *p, true);
  if (r.get("rope_theta") && inside.theta != out.theta)
    r.fail("rope_theta", float_text(out.theta),
           "disagrees with rope_parameters.rope_theta = " + float_text(inside.theta) + "; which does the model use?");
  if (const JsonValue* v = r.get("rope_scaling"); v && !v->is_null() && inside.scaling != out.scaling)
    r.fail("rope_scaling", *v, "disagrees with rope_parameters; which does the model use?");
  return inside;
}

// The keys whose only supported value is Llama's: biases, activation, head size, sliding window.
void refuse_other_variants(HfReader& r, const HfLlamaConfig& c) {
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (r.boolean(key, false))
      r.fail(key, *r.get(key), "is not supported: axonn's Llama shape has no linear biases (model.bias = false)");
  if (const JsonValue* act = r.get("hidden_act"); act && (!act->is_string() || act->string() != "silu"))
    r.fail("hidden_act", *act, "is not supported: axonn's SwiGLU gates with \"silu\"");
  const int head_dim = c.hidden_size / c.num_attention_heads;
  if (const int d = r.dim("head_dim", head_dim, true); d != head_dim)
    r.fail("head_dim", *r.get("head_dim"),
           "is not supported: axonn's head size is hidden_size / num_attention_heads = " + std::to_string(head_dim));
  const bool use_window = r.boolean("use_sliding_window", true);
  if (const JsonValue* w = r.get("sliding_window"); w && !w->is_null() && use_window)
    r.fail("sliding_window", *w,
           "is not supported: axonn's attention is causal over the whole sequence; a model trained with a "
           "sliding window (Mistral 7B v0.1) cannot be imported");
  if (const JsonValue* q = r.get("quantization_config"))
    r.fail("quantization_config", *q, "is not supported: axonn imports unquantized weights only");
}

}  // namespace

HfLlamaConfig read_hf_config(const std::string& json_text, const std::string& file_for_messages) {
  JsonValue root;
  try {
    root = parse_json(json_text);
  } catch (const JsonError& e) {
    throw JsonError(file_for_messages + ": " + e.what());
  }
  if (!root.is_object()) throw ConfigError(file_for_messages + ": holds " + root.type_name() + ", not an object");
  HfReader r(root, file_for_messages);
  HfLlamaConfig c;
  read_family(r, c);
  c.num_hidden_layers = r.dim("num_hidden_layers", c.num_hidden_layers);
  c.hidden_size = r.dim("hidden_size", c.hidden_size);
  c.num_attention_heads = r.dim("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = r.dim("num_key_value_heads", c.num_attention_heads, true);
  c.intermediate_size = r.dim("intermediate_size", c.intermediate_size);
  c.vocab_size = r.dim("vocab_size", c.vocab_size);
  c.max_position_embeddings = r.dim("max_position_embeddings", c.max_position_embeddings);
  c.rms_norm_eps = r.positive("rms_norm_eps", c.rms_norm_eps);
  const Rotary rotary = read_rotary(r);
  c.rope_theta = rotary.theta;
  c.rope_scaling = rotary.scaling;
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", c.tie_word_embeddings);

  const std::string heads = std::to_string(c.num_attention_heads);
  if (c.hidden_size % c.num_attention_heads != 0)
    r.fail("num_attention_heads", heads, "must divide hidden_size = " + std::to_string(c.hidden_size));
  if ((c.hidden_size / c.num_attention_heads) % 2 != 0)
    r.fail("num_attention_heads", heads,
           "gives an odd head size " + std::to_string(c.hidden_size / c.num_attention_heads) +
               "; RoPE rotates pairs of a head's elements");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", std::to_string(c.num_key_value_heads),
           "must divide num_attention_heads = " + std::to_string(c.num_attention_heads));
  refuse_other_variants(r, c);
  r.finish();
  return c;
}

ModelShape hf_model_shape(const HfLlamaConfig& c) {
  ModelShape m;
  m.layers = c.num_hidden_layers;
  m.hidden = c.hidden_size;
  m.heads = c.num_attention_heads;
  m.kv_heads = c.num_key_value_heads > 0 ? c.num_key_value_heads : c.num_attention_heads;
  m.vocab = c.vocab_size;
  m.sequence = c.max_position_embeddings;
  m.norm = Norm::rmsnorm;
  m.norm_eps = c.rms_norm_eps;
  m.mlp = Mlp::swiglu;
  m.mlp_hidden = c.intermediate_size;
  m.positions = Positions::rope;
  m.rope_theta = c.rope_theta;
  m.rope_scaling = c.rope_scaling;
  m.bias = false;
  m.tie_embeddings = c.tie_word_embeddings;
  return m;
}

std::vector<std::string> config_mismatches(const HfLlamaConfig& config, const ModelShape& job) {
  const ModelShape hf = hf_model_shape(config);
  std::vector<std::string> out;
  auto differ = [&](const std::string& hf_key, const std::string& hf_value, const std::string& job_key,
                    const std::string& job_value) {
    if (hf_value != job_value)
      out.push_back(hf_key + " = " + hf_value + " in config.json, but model." + job_key + " = " + job_value +
                    " in the job");
  };
  auto integer = [](int64_t v) { return std::to_string(v); };
  auto flag = [](bool v) { return std::string(v ? "true" : "false"); };
  auto quoted = [](const char* v) { return json_string(v); };
  // The architecture config.json implies (no key of its own), then the keys, in the job's order.
  const std::string arch = config.architecture;
  differ(arch + " norm", quoted(norm_name(hf.norm)), "norm", quoted(norm_name(job.norm)));
  differ(arch + " mlp", quoted(mlp_name(hf.mlp)), "mlp", quoted(mlp_name(job.mlp)));
  differ(arch + " positions", quoted(positions_name(hf.positions)), "positions", quoted(positions_name(job.positions)));
  differ(arch + " biases", flag(hf.bias), "bias", flag(job.bias));
  differ(arch + " experts", "0", "experts", integer(job.experts));
  differ("num_hidden_layers", integer(hf.layers), "layers", integer(job.layers));
  differ("hidden_size", integer(hf.hidden), "hidden", integer(job.hidden));
  differ("num_attention_heads", integer(hf.heads), "heads", integer(job.heads));
  differ("num_key_value_heads", integer(hf.kv()), "kv_heads", integer(job.kv()));
  differ("intermediate_size", integer(hf.ffn()), "mlp_hidden", integer(job.ffn()));
  differ("vocab_size", integer(hf.vocab), "vocab", integer(job.vocab));
  differ("rms_norm_eps", float_text(hf.norm_eps), "norm_eps", float_text(job.norm_eps));
  differ("rope_theta", float_text(hf.rope_theta), "rope_theta", float_text(job.rope_theta));
  differ("tie_word_embeddings", flag(hf.tie_embeddings), "tie_embeddings", flag(job.tie_embeddings));
  if (hf.rope_scaling.has_value() != job.rope_scaling.has_value()) {
    differ("rope_scaling", hf.rope_scaling ? "{\"rope_type\": \"llama3\", ...}" : "null", "rope_scaling",
           job.rope_scaling ? "{rope_type = \"llama3\", ...}" : "unset");
  } else if (hf.rope_scaling) {
    const RopeScaling &a = *hf.rope_scaling, &b = *job.rope_scaling;
    differ("rope_scaling.factor", float_text(a.factor), "rope_scaling.factor", float_text(b.factor));
    differ("rope_scaling.low_freq_factor", float_text(a.low_freq_factor), "rope_scaling.low_freq_factor",
           float_text(b.low_freq_factor));
    differ("rope_scaling.high_freq_factor", float_text(a.high_freq_factor), "rope_scaling.high_freq_factor",
           float_text(b.high_freq_factor));
    differ("rope_scaling.original_max_position_embeddings", integer(a.original_positions),
           "rope_scaling.original_max_position_embeddings", integer(b.original_positions));
  }
  return out;
}

void require_llama_form(const ModelShape& m) {
  std::vector<std::string> wrong;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) wrong.push_back(what);
  };
  need(m.norm == Norm::rmsnorm, "model.norm = \"" + std::string(norm_name(m.norm)) + "\" (Llama: \"rmsnorm\")");
  need(m.mlp == Mlp::swiglu, "model.mlp = \"" + std::string(mlp_name(m.mlp)) + "\" (Llama: \"swiglu\")");
  need(m.positions == Positions::rope,
       "model.positions = \"" + std::string(positions_name(m.positions)) + "\" (Llama: \"rope\")");
  need(!m.bias, "model.bias = true (Llama: false)");
  need(!m.moe(), "model.experts = " + std::to_string(m.experts) + " (Llama: 0, dense)");
  if (!wrong.empty()) {
    std::string list;
    for (const std::string& w : wrong) list += (list.empty() ? "" : ", ") + w;
    throw ConfigError("the model has no LlamaForCausalLM form: " + list +
                      "; only rmsnorm + swiglu + rope models without biases or experts have one");
  }
}

std::string write_hf_config(const ModelShape& m) {
  require_llama_form(m);
  std::string rope_scaling = "null";
  if (m.rope_scaling) {
    const RopeScaling& s = *m.rope_scaling;
    rope_scaling = "{\n    \"factor\": " + float_text(s.factor) +
                   ",\n    \"high_freq_factor\": " + float_text(s.high_freq_factor) +
                   ",\n    \"low_freq_factor\": " + float_text(s.low_freq_factor) +
                   ",\n    \"original_max_position_embeddings\": " + std::to_string(s.original_positions) +
                   ",\n    \"rope_type\": \"llama3\"\n  }";
  }
  // transformers' own order: sorted keys, two-space indent.
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"architectures", "[\n    \"LlamaForCausalLM\"\n  ]"},
      {"attention_bias", "false"},
      {"attention_dropout", "0.0"},
      {"head_dim", std::to_string(m.head_dim())},
      {"hidden_act", "\"silu\""},
      {"hidden_size", std::to_string(m.hidden)},
      {"initializer_range", "0.02"},
      {"intermediate_size", std::to_string(m.ffn())},
      {"max_position_embeddings", std::to_string(m.sequence)},
      {"mlp_bias", "false"},
      {"model_type", "\"llama\""},
      {"num_attention_heads", std::to_string(m.heads)},
      {"num_hidden_layers", std::to_string(m.layers)},
      {"num_key_value_heads", std::to_string(m.kv())},
      {"pretraining_tp", "1"},
      {"rms_norm_eps", float_text(m.norm_eps)},
      {"rope_scaling", rope_scaling},
      {"rope_theta", float_text(m.rope_theta)},
      {"tie_word_embeddings", m.tie_embeddings ? "true" : "false"},
      {"torch_dtype", "\"float32\""},
      {"use_cache", "true"},
      {"vocab_size", std::to_string(m.vocab)},
  };
  std::string out = "{\n";
  for (size_t i = 0; i < keys.size(); ++i)
    out += "  \"" + keys[i].first + "\": " + keys[i].second + (i + 1 < keys.size() ? ",\n" : "\n");
  return out + "}\n";
}

}  // namespace axonn
