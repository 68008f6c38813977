// Hugging Face Llama checkpoints and axonn's parameters (runner/hf): config.json read strictly
// and written for LlamaConfig, the tensor lists against the trainer's parameter table, a
// bit-identical round trip of every tensor, and that the imported q/k weights give the same
// attention scores under axonn's interleaved RoPE as HF's under its rotate-half RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "config/config_error.hpp"
#include "core/json_reader.hpp"
#include "runner/hf/hf_config.hpp"
#include "runner/hf/llama_tensors.hpp"
#include "trainer/model/parameters.hpp"

namespace axonn {
namespace {

using Keys = std::vector<std::pair<std::string, std::string>>;

// Meta's Llama 3.1 8B config.json, as transformers wrote it.
const Keys kLlama31 = {
    {"architectures", "[\"LlamaForCausalLM\"]"},
    {"attention_bias", "false"},
    {"attention_dropout", "0.0"},
    {"bos_token_id", "128000"},
    {"eos_token_id", "[128001, 128008, 128009]"},
    {"hidden_act", "\"silu\""},
    {"hidden_size", "4096"},
    {"initializer_range", "0.02"},
    {"intermediate_size", "14336"},
    {"max_position_embeddings", "131072"},
    {"mlp_bias", "false"},
    {"model_type", "\"llama\""},
    {"num_attention_heads", "32"},
    {"num_hidden_layers", "32"},
    {"num_key_value_heads", "8"},
    {"pretraining_tp", "1"},
    {"rms_norm_eps", "1e-05"},
    {"rope_scaling",
     "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
     "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}"},
    {"rope_theta", "500000.0"},
    {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""},
    {"transformers_version", "\"4.43.0.dev0\""},
    {"use_cache", "true"},
    {"vocab_size", "128256"},
};

// `base` with each of `changes` replacing its key's value, or added; a value "DROP" removes the key.
std::string config_json(const Keys& base, const Keys& changes = {}) {
  Keys keys = base;
  for (const auto& [key, value] : changes) {
    bool replaced = false;
    for (auto& kv : keys) {
      if (kv.first == key) {
        kv.second = value;
        replaced = true;
      }
    }
    if (!replaced) keys.push_back({key, value});
  }
  std::string out = "{";
  for (const auto& [key, value] : keys) {
    if (value == "DROP") continue;
    out += (out.size() > 1 ? ", \"" : "\"") + key + "\": " + value;
  }
  return out + "}";
}

TEST(HfConfig, ReadsLlama31) {
  const HfLlamaConfig c = read_hf_config(config_json(kLlama31), "config.json");
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(*c.rope_scaling, (RopeScaling{8.0, 1.0, 4.0, 8192}));

  const ModelShape m = hf_model_shape(c);
  EXPECT_EQ(m.norm, Norm::rmsnorm);
  EXPECT_EQ(m.mlp, Mlp::swiglu);
  EXPECT_EQ(m.positions, Positions::rope);
  EXPECT_FALSE(m.bias);
  EXPECT_EQ(m.kv(), 8);
  EXPECT_EQ(m.ffn(), 14336);
  EXPECT_EQ(m.sequence, 131072);
}

TEST(HfConfig, AcceptsLegacyRopeTypeMistralAndDefaults) {
  // Llama 3.1's first configs keyed the rule "type"; Mistral 7B v0.3 is Llama's tensors with
  // sliding_window null; a Llama 2 config without num_key_value_heads means MHA.
  const std::string legacy =
      config_json(kLlama31, {{"rope_scaling",
                              "{\"type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                              "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"}});
  EXPECT_TRUE(read_hf_config(legacy, "config.json").rope_scaling.has_value());
  const HfLlamaConfig mistral = read_hf_config(config_json(kLlama31, {{"architectures", "[\"MistralForCausalLM\"]"},
                                                                      {"model_type", "\"mistral\""},
                                                                      {"sliding_window", "null"},
                                                                      {"rope_scaling", "DROP"},
                                                                      {"head_dim", "128"}}),
                                               "config.json");
  EXPECT_FALSE(mistral.rope_scaling.has_value());
  const HfLlamaConfig llama2 =
      read_hf_config(config_json(kLlama31, {{"num_key_value_heads", "DROP"}, {"rope_scaling", "null"}}), "c.json");
  EXPECT_EQ(hf_model_shape(llama2).kv(), 32);
  EXPECT_FALSE(hf_model_shape(llama2).grouped_attention());
  // Newer transformers: rope_parameters holds theta and the scaling rule.
  const HfLlamaConfig plain = read_hf_config(
      config_json(kLlama31, {{"rope_theta", "DROP"},
                             {"rope_scaling", "DROP"},
                             {"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 250000.0}"}}),
      "config.json");
  EXPECT_EQ(plain.rope_theta, 250000.0);
  EXPECT_FALSE(plain.rope_scaling.has_value());
  const HfLlamaConfig both =
      read_hf_config(config_json(kLlama31, {{"rope_parameters",
                                             "{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, "
                                             "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                             "\"original_max_position_embeddings\": 8192}"}}),
                     "config.json");
  EXPECT_EQ(both.rope_theta, 500000.0);
  EXPECT_EQ(both.rope_scaling, read_hf_config(config_json(kLlama31), "config.json").rope_scaling);
}

// Each unsupported setting is refused with exit code 2, naming the file, the key and its value.
TEST(HfConfig, RefusesEveryUnsupportedField) {
  const std::vector<std::pair<Keys, std::string>> cases = {
      {{{"attention_bias", "true"}}, "attention_bias = true is not supported"},
      {{{"mlp_bias", "true"}}, "mlp_bias = true is not supported"},
      {{{"hidden_act", "\"gelu\""}}, "hidden_act = \"gelu\" is not supported"},
      {{{"head_dim", "64"}},
       "head_dim = 64 is not supported: axonn's head size is hidden_size / "
       "num_attention_heads = 128"},
      {{{"model_type", "\"mistral\""}, {"sliding_window", "4096"}}, "sliding_window = 4096 is not supported"},
      {{{"use_sliding_window", "true"}, {"sliding_window", "131072"}}, "sliding_window = 131072 is not supported"},
      {{{"rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 2.0}"}},
       "rope_scaling.rope_type = \"linear\" is not supported"},
      {{{"rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2.0}"}},
       "rope_scaling.type = \"dynamic\" is not supported"},
      {{{"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}"}},
       "rope_scaling.rope_type = \"yarn\" is not supported"},
      {{{"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
         "\"original_max_position_embeddings\": 8192}"}},
       "has no high_freq_factor"},
      {{{"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"beta\": 1}"}},
       "rope_scaling.beta = 1 is a key axonn does not know"},
      {{{"rope_parameters", "{\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, \"factor\": 4.0}"}},
       "rope_parameters.rope_type = \"yarn\" is not supported"},
      {{{"rope_parameters", "{\"rope_type\": \"default\"}"}}, "rope_parameters = an object has no rope_theta"},
      {{{"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}"}},
       "rope_theta = 500000.0 disagrees with rope_parameters.rope_theta = 10000.0"},
      {{{"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 500000.0}"}},
       "rope_scaling = an object disagrees with rope_parameters"},
      {{{"model_type", "\"qwen2\""}}, "model_type = \"qwen2\" is Qwen 2, whose q_proj, k_proj and v_proj have biases"},
      {{{"architectures", "[\"Qwen2ForCausalLM\"]"}}, "architectures = \"Qwen2ForCausalLM\" is Qwen 2"},
      {{{"model_type", "\"gpt2\""}}, "model_type = \"gpt2\" is not supported"},
      {{{"architectures", "[\"GemmaForCausalLM\"]"}}, "architectures = \"GemmaForCausalLM\" is not supported"},
      {{{"quantization_config", "{\"quant_method\": \"awq\"}"}}, "quantization_config = an object is not supported"},
      {{{"auto_map", "{}"}}, "auto_map = an object is a key axonn does not know"},
      {{{"num_key_value_heads", "3"}}, "num_key_value_heads = 3 must divide num_attention_heads = 32"},
      {{{"num_attention_heads", "3"}}, "num_attention_heads = 3 must divide hidden_size = 4096"},
      {{{"num_attention_heads", "4096"}, {"num_key_value_heads", "4096"}}, "gives an odd head size 1"},
      {{{"hidden_size", "0"}}, "hidden_size = 0 must be an integer in [1, 16777216]"},
      {{{"vocab_size", "1.5"}}, "vocab_size = 1.5 must be an integer"},
      {{{"rms_norm_eps", "\"small\""}}, "rms_norm_eps = \"small\" must be a number above 0"},
      {{{"tie_word_embeddings", "1"}}, "tie_word_embeddings = 1 must be true or false"},
  };
  for (const auto& [changes, expected] : cases) {
    SCOPED_TRACE(expected);
    try {
      read_hf_config(config_json(kLlama31, changes), "ckpt/config.json");
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find("ckpt/config.json: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_hf_config("{\"hidden_size\": 4096,", "config.json"), JsonError);
  EXPECT_THROW(read_hf_config("[1]", "config.json"), ConfigError);
}

TEST(HfConfig, MismatchLinesNameBothKeysAndValues) {
  const HfLlamaConfig c = read_hf_config(config_json(kLlama31), "config.json");
  ModelShape job = hf_model_shape(c);
  job.sequence = 8192;  // a job may train at any length: not a mismatch
  EXPECT_TRUE(config_mismatches(c, job).empty());

  job.kv_heads = 4;
  job.hidden = 2048;
  job.tie_embeddings = true;
  job.norm = Norm::layernorm;
  job.rope_theta = 10000.0;
  job.rope_scaling->factor = 4.0;
  EXPECT_EQ(config_mismatches(c, job),
            (std::vector<std::string>{
                "LlamaForCausalLM norm = \"rmsnorm\" in config.json, but model.norm = \"layernorm\" in the job",
                "hidden_size = 4096 in config.json, but model.hidden = 2048 in the job",
                "num_key_value_heads = 8 in config.json, but model.kv_heads = 4 in the job",
                "rope_theta = 500000.0 in config.json, but model.rope_theta = 10000.0 in the job",
                "tie_word_embeddings = false in config.json, but model.tie_embeddings = true in the job",
                "rope_scaling.factor = 8.0 in config.json, but model.rope_scaling.factor = 4.0 in the job",
            }));
  job = hf_model_shape(c);
  job.rope_scaling.reset();
  job.norm_eps = 1e-6;
  EXPECT_EQ(config_mismatches(c, job),
            (std::vector<std::string>{
                "rms_norm_eps = 1e-05 in config.json, but model.norm_eps = 1e-06 in the job",
                "rope_scaling = {\"rope_type\": \"llama3\", ...} in config.json, but model.rope_scaling = unset in "
                "the job",
            }));
}

// The small models the tensor tests use: grouped (C=16, H=4, KV=2, d=4, F=24, V=32, L=2,
// untied) and multi-head with tied embeddings.
ModelShape small_llama(bool grouped) {
  ModelShape m;
  m.layers = 2;
  m.hidden = 16;
  m.heads = 4;
  m.kv_heads = grouped ? 2 : 4;
  m.vocab = 32;
  m.sequence = 64;
  m.norm = Norm::rmsnorm;
  m.mlp = Mlp::swiglu;
  m.mlp_hidden = 24;
  m.positions = Positions::rope;
  m.rope_theta = 10000.0;
  m.bias = false;
  m.tie_embeddings = !grouped;
  return m;
}

TEST(HfConfig, WriteThenReadIsTheSameModel) {
  ModelShape scaled = small_llama(true);
  scaled.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 8192};
  scaled.norm_eps = 1e-6;
  scaled.rope_theta = 500000.0;
  for (const ModelShape& m : {small_llama(true), small_llama(false), scaled}) {
    const std::string text = write_hf_config(m);
    SCOPED_TRACE(text);
    const HfLlamaConfig c = read_hf_config(text, "out/config.json");
    EXPECT_TRUE(config_mismatches(c, m).empty());
    EXPECT_EQ(c.max_position_embeddings, m.sequence);
    EXPECT_EQ(hf_model_shape(c).rope_scaling, m.rope_scaling);
    EXPECT_NE(text.find("\"torch_dtype\": \"float32\""), std::string::npos);
    EXPECT_NE(text.find("\"rope_theta\": " + std::string(m.rope_theta == 500000.0 ? "500000.0" : "10000.0")),
              std::string::npos);
  }
  ModelShape gpt2;  // layernorm, gelu, learned positions, biases
  try {
    write_hf_config(gpt2);
    ADD_FAILURE() << "wrote a GPT-2 model as Llama";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the model has no LlamaForCausalLM form: model.norm = \"layernorm\" (Llama: \"rmsnorm\"), model.mlp = "
              "\"gelu\" (Llama: \"swiglu\"), model.positions = \"learned\" (Llama: \"rope\"), model.bias = true "
              "(Llama: false); only rmsnorm + swiglu + rope models without biases or experts have one");
  }
  EXPECT_THROW(hf_llama_tensors(gpt2), ConfigError);
}

TEST(LlamaTensors, GroupedModelListsHfTensorsInStateDictOrder) {
  const std::vector<HfTensor> t = hf_llama_tensors(small_llama(true));
  ASSERT_EQ(t.size(), 1u + 2 * 9 + 2);
  using Shape = std::vector<int64_t>;
  const std::vector<std::pair<std::string, Shape>> first = {
      {"model.embed_tokens.weight", {32, 16}},
      {"model.layers.0.self_attn.q_proj.weight", {16, 16}},
      {"model.layers.0.self_attn.k_proj.weight", {8, 16}},
      {"model.layers.0.self_attn.v_proj.weight", {8, 16}},
      {"model.layers.0.self_attn.o_proj.weight", {16, 16}},
      {"model.layers.0.mlp.gate_proj.weight", {24, 16}},
      {"model.layers.0.mlp.up_proj.weight", {24, 16}},
      {"model.layers.0.mlp.down_proj.weight", {16, 24}},
      {"model.layers.0.input_layernorm.weight", {16}},
      {"model.layers.0.post_attention_layernorm.weight", {16}},
  };
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(t[i].name, first[i].first);
    EXPECT_EQ(t[i].shape, first[i].second) << t[i].name;
  }
  EXPECT_EQ(t[1].axonn_source, "h.0.attn.qkv.weight");
  EXPECT_EQ(t[10].name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(t[19].name, "model.norm.weight");
  EXPECT_EQ(t[19].axonn_source, "ln_f.weight");
  EXPECT_EQ(t[20].name, "lm_head.weight");
  EXPECT_EQ(t[20].axonn_source, "lm_head.weight");

  const std::vector<HfTensor> mha = hf_llama_tensors(small_llama(false));  // tied: no lm_head
  ASSERT_EQ(mha.size(), 1u + 2 * 9 + 1);
  EXPECT_EQ(mha[2].shape, (Shape{16, 16}));  // k_proj: H*d rows
  EXPECT_EQ(mha.back().name, "model.norm.weight");
}

// axonn's side of the map is exactly the trainer's parameter table: names, shapes, order.
TEST(LlamaTensors, AxonnSideIsTheParameterTable) {
  for (bool grouped : {true, false}) {
    const ModelShape m = small_llama(grouped);
    const std::vector<AxonnFromHf> ours = axonn_llama_tensors(m);
    const std::vector<ParamSpec> table = gpt_parameters(m);
    ASSERT_EQ(ours.size(), table.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ(ours[i].name, table[i].name);
      EXPECT_EQ(ours[i].shape, table[i].shape) << ours[i].name;
    }
    const AxonnFromHf& qkv = ours[grouped ? 2 : 1];
    EXPECT_EQ(qkv.name, "h.0.attn.qkv.weight");
    EXPECT_EQ(qkv.shape, grouped ? (std::vector<int64_t>{16, 2, 4, 4}) : (std::vector<int64_t>{16, 3, 16}));
    EXPECT_EQ(qkv.hf_sources, (std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight",
                                                        "model.layers.0.self_attn.k_proj.weight",
                                                        "model.layers.0.self_attn.v_proj.weight"}));
    EXPECT_EQ(ours[grouped ? 4 : 3].hf_sources,
              (std::vector<std::string>{"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"}));
  }
}

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

// Every HF tensor of `m` filled with distinct values.
std::map<std::string, std::vector<float>> random_hf(const ModelShape& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::map<std::string, std::vector<float>> out;
  for (const HfTensor& t : hf_llama_tensors(m)) {
    std::vector<float>& v = out[t.name];
    v.resize(static_cast<size_t>(elements(t.shape)));
    for (float& x : v) x = normal(rng);
  }
  return out;
}

std::map<std::string, std::vector<float>> import_all(const ModelShape& m,
                                                     const std::map<std::string, std::vector<float>>& hf) {
  std::map<std::string, std::vector<float>> out;
  for (const AxonnFromHf& t : axonn_llama_tensors(m)) {
    std::vector<const float*> sources;
    for (const std::string& s : t.hf_sources) sources.push_back(hf.at(s).data());
    std::vector<float>& v = out[t.name];
    v.assign(static_cast<size_t>(elements(t.shape)), std::nanf(""));
    hf_to_axonn(t.name, sources, v.data(), m);
  }
  return out;
}

TEST(LlamaTensors, RoundTripIsBitIdenticalAndCoversEveryElement) {
  for (bool grouped : {true, false}) {
    const ModelShape m = small_llama(grouped);
    const auto hf = random_hf(m, 7);
    const auto axonn = import_all(m, hf);
    for (const auto& [name, v] : axonn) {
      for (float x : v) {
        if (std::isnan(x)) {
          ADD_FAILURE() << name << " has an element no HF tensor wrote";
          break;
        }
      }
    }
    for (const HfTensor& t : hf_llama_tensors(m)) {
      std::vector<float> back(static_cast<size_t>(elements(t.shape)), std::nanf(""));
      axonn_to_hf(t.name, axonn.at(t.axonn_source).data(), back.data(), m);
      EXPECT_EQ(std::memcmp(back.data(), hf.at(t.name).data(), back.size() * sizeof(float)), 0) << t.name;
    }
  }
}

TEST(LlamaTensors, LinearWeightsAreTransposedAndGateComesFirst) {
  const ModelShape m = small_llama(true);
  const int64_t C = 16, F = 24;
  const auto hf = random_hf(m, 11);
  const auto ax = import_all(m, hf);
  const auto& gate = hf.at("model.layers.1.mlp.gate_proj.weight");
  const auto& up = hf.at("model.layers.1.mlp.up_proj.weight");
  const auto& down = hf.at("model.layers.1.mlp.down_proj.weight");
  const auto& o = hf.at("model.layers.1.self_attn.o_proj.weight");
  const auto& fc = ax.at("h.1.mlp.fc.weight");      // [C, 2, F]
  const auto& proj = ax.at("h.1.mlp.proj.weight");  // [F, C]
  const auto& attn_proj = ax.at("h.1.attn.proj.weight");
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t f = 0; f < F; ++f) {
      EXPECT_EQ(fc[c * 2 * F + f], gate[f * C + c]);
      EXPECT_EQ(fc[c * 2 * F + F + f], up[f * C + c]);
      EXPECT_EQ(proj[f * C + c], down[c * F + f]);
    }
    for (int64_t i = 0; i < C; ++i) {
      EXPECT_EQ(attn_proj[i * C + c], o[c * C + i]);
    }
  }
  EXPECT_EQ(ax.at("wte"), hf.at("model.embed_tokens.weight"));
  EXPECT_EQ(ax.at("lm_head.weight"), hf.at("lm_head.weight"));
  EXPECT_EQ(ax.at("h.0.ln2.weight"), hf.at("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_THROW(hf_to_axonn("h.2.attn.qkv.weight", {}, nullptr, m), std::invalid_argument);
  EXPECT_THROW(hf_to_axonn("h.0.mlp.fc.weight", {gate.data()}, nullptr, m), std::invalid_argument);
  EXPECT_THROW(axonn_to_hf("model.layers.0.self_attn.q_proj.bias", nullptr, nullptr, m), std::invalid_argument);
}

// Column of axonn's qkv [C, W] where element j of head `head` of q (0), k (1) or v (2) sits,
// written from docs/llama.md's layouts independently of the library.
int64_t qkv_col(const ModelShape& m, int part, int64_t head, int64_t j) {
  const int64_t d = m.head_dim();
  if (!m.grouped_attention()) return part * m.hidden + head * d + j;
  const int64_t per = m.heads / m.kv(), slots = per + 2;
  const int64_t group = part == 0 ? head / per : head, slot = part == 0 ? head % per : per + part - 1;
  return (group * slots + slot) * d + j;
}

// HF's Llama RoPE: q·cos + rotate_half(q)·sin, rotate_half(q) = (−q[d/2:], q[:d/2]), the
// frequency of element r being that of pair r mod d/2.
std::vector<double> rope_rotate_half(const std::vector<double>& q, int64_t t, double theta) {
  const int64_t d = static_cast<int64_t>(q.size()), half = d / 2;
  std::vector<double> out(q.size());
  for (int64_t r = 0; r < d; ++r) {
    const double angle =
        static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(r % half) / static_cast<double>(d));
    const double rotated = r < half ? -q[r + half] : q[r - half];
    out[r] = q[r] * std::cos(angle) + rotated * std::sin(angle);
  }
  return out;
}

// Meta's (and axonn's) RoPE: pair (2i, 2i+1) turned by t·θ^(−2i/d).
std::vector<double> rope_interleaved(const std::vector<double>& q, int64_t t, double theta) {
  const int64_t d = static_cast<int64_t>(q.size());
  std::vector<double> out(q.size());
  for (int64_t i = 0; i < d / 2; ++i) {
    const double angle =
        static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const double c = std::cos(angle), s = std::sin(angle), x0 = q[2 * i], x1 = q[2 * i + 1];
    out[2 * i] = x0 * c - x1 * s;
    out[2 * i + 1] = x0 * s + x1 * c;
  }
  return out;
}

// One head of x·W: HF's rows [head·d, (head+1)·d) of W [out, C], or axonn's columns of qkv.
std::vector<double> hf_head(const std::vector<float>& w, const std::vector<double>& x, int64_t head, int64_t d) {
  const int64_t C = static_cast<int64_t>(x.size());
  std::vector<double> out(static_cast<size_t>(d), 0.0);
  for (int64_t r = 0; r < d; ++r) {
    for (int64_t c = 0; c < C; ++c) out[r] += static_cast<double>(w[(head * d + r) * C + c]) * x[c];
  }
  return out;
}
std::vector<double> axonn_head(const ModelShape& m, const std::vector<float>& qkv, const std::vector<double>& x,
                               int part, int64_t head) {
  const int64_t C = m.hidden, d = m.head_dim(), W = m.qkv_width();
  std::vector<double> out(static_cast<size_t>(d), 0.0);
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t c = 0; c < C; ++c) out[j] += static_cast<double>(qkv[c * W + qkv_col(m, part, head, j)]) * x[c];
  }
  return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The import's permutation is the one that makes the two RoPE forms agree: every query head's
// rotated q (and its group's rotated k) are HF's with the head's elements reordered, so each
// attention score q·k is the same; v is not rotated and keeps its order.
TEST(LlamaTensors, ImportedQkGiveHfAttentionScoresUnderInterleavedRope) {
  for (bool grouped : {true, false}) {
    const ModelShape m = small_llama(grouped);
    const int64_t d = m.head_dim(), per = m.heads / m.kv(), t = 5;
    const double theta = 10000.0;
    const auto hf = random_hf(m, 3);
    const auto ax = import_all(m, hf);
    std::mt19937 rng(5);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> x(static_cast<size_t>(m.hidden));
    for (double& e : x) e = normal(rng);
    const auto& qkv = ax.at("h.1.attn.qkv.weight");
    const auto& q_proj = hf.at("model.layers.1.self_attn.q_proj.weight");
    const auto& k_proj = hf.at("model.layers.1.self_attn.k_proj.weight");
    const auto& v_proj = hf.at("model.layers.1.self_attn.v_proj.weight");
    for (int64_t h = 0; h < m.heads; ++h) {
      SCOPED_TRACE("grouped " + std::to_string(grouped) + " head " + std::to_string(h));
      const auto q_hf = rope_rotate_half(hf_head(q_proj, x, h, d), t, theta);
      const auto k_hf = rope_rotate_half(hf_head(k_proj, x, h / per, d), t, theta);
      const auto q_ax = rope_interleaved(axonn_head(m, qkv, x, 0, h), t, theta);
      const auto k_ax = rope_interleaved(axonn_head(m, qkv, x, 1, h / per), t, theta);
      EXPECT_NEAR(dot(q_ax, k_ax), dot(q_hf, k_hf), 1e-9 * (1 + std::abs(dot(q_hf, k_hf))));
      for (int64_t r = 0; r < d / 2; ++r) {
        EXPECT_NEAR(q_ax[2 * r], q_hf[r], 1e-12);
        EXPECT_NEAR(q_ax[2 * r + 1], q_hf[r + d / 2], 1e-12);
      }
    }
    for (int64_t g = 0; g < m.kv(); ++g) {
      EXPECT_EQ(axonn_head(m, qkv, x, 2, g), hf_head(v_proj, x, g, d));
    }
  }
}

}  // namespace
}  // namespace axonn
