#pragma once
// A Hugging Face Llama checkpoint's config.json and axonn's ModelShape, both ways, pure (the
// caller reads and writes the file). `axonn ckpt import-hf` reads config.json to check the
// job's [model] against it; `axonn ckpt export-hf` writes one that transformers' LlamaConfig
// loads.
//
// What is read: LlamaForCausalLM (model_type "llama"), and MistralForCausalLM without a
// sliding window (Mistral 7B v0.2 and later: the same tensors and math). Everything that would
// change the weights' meaning and that axonn does not build is refused by name, with the value
// and why: attention_bias / mlp_bias true, hidden_act other than "silu", a sliding window,
// rope_scaling other than Llama 3.1's "llama3", head_dim other than hidden_size /
// num_attention_heads, Qwen 2 (biases on q, k and v), quantization_config, and any key this
// file does not know (it might change the model; a key that does not can be deleted from the
// file). The rotary settings are read from rope_theta and rope_scaling, or from newer
// transformers' rope_parameters (which must agree with them where both are given). Keys that
// do not touch the weights (token ids, torch_dtype, use_cache, ...) are
// accepted and not kept.
#include <optional>
#include <string>
#include <vector>

#include "layout/layout_inputs.hpp"

namespace axonn {

// The fields of config.json that shape the model. Defaults are LlamaConfig's, used for the
// keys a file leaves out (transformers writes the shape keys always).
struct HfLlamaConfig {
  std::string architecture = "LlamaForCausalLM";
  std::string model_type = "llama";
  int num_hidden_layers = 32;          // L
  int hidden_size = 4096;              // C
  int num_attention_heads = 32;        // H
  int num_key_value_heads = 0;         // KV; 0: H (read_hf_config always sets it)
  int intermediate_size = 11008;       // F
  int vocab_size = 32000;              // V
  int max_position_embeddings = 2048;  // the context the model was trained for
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling = std::nullopt;
  bool tie_word_embeddings = false;
};

// config.json's text parsed and checked. file_for_messages prefixes every message. ConfigError
// (exit 2) naming the key, its value and what axonn supports; JsonError for malformed JSON.
HfLlamaConfig read_hf_config(const std::string& json_text, const std::string& file_for_messages);

// The ModelShape of the model `config` describes: rmsnorm, swiglu, rope, no biases;
// sequence = max_position_embeddings.
ModelShape hf_model_shape(const HfLlamaConfig& config);

// One line per field where `job` differs from `config`, e.g.
//   "num_key_value_heads = 8 in config.json, but model.kv_heads = 4 in the job".
// Empty: the checkpoint's tensors are exactly the job's parameters. max_position_embeddings
// is not compared with model.sequence: RoPE has no table of positions, so a job may train at
// any sequence length.
std::vector<std::string> config_mismatches(const HfLlamaConfig& config, const ModelShape& job);

// Whether `model` has a LlamaForCausalLM form (rmsnorm, swiglu, rope, bias = false, no
// experts); ConfigError naming each key that differs and its Llama value otherwise.
void require_llama_form(const ModelShape& model);

// A config.json (pretty-printed, keys sorted as transformers writes them) that LlamaConfig
// loads as `model`: torch_dtype "float32" (the tensors an export writes), sequence as
// max_position_embeddings. require_llama_form's ConfigError for a model without a Llama form.
std::string write_hf_config(const ModelShape& model);

}  // namespace axonn
