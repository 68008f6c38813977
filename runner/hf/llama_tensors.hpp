#pragma once
// Hugging Face LlamaForCausalLM's tensors and axonn's parameters (trainer/model/parameters.hpp),
// both ways, on float32 buffers, one tensor at a time: an import holds one axonn tensor and
// its sources (at most one layer's q, k, v and qkv), an export one axonn tensor and one HF
// tensor. Every conversion only moves elements, so a round trip is bit-identical.
//
// C hidden, H heads of size d, KV key/value heads, F MLP hidden, V vocab; HF's nn.Linear
// stores [out, in] and axonn's x·W stores [in, out], so every linear weight is transposed:
//   model.embed_tokens.weight [V, C]              = wte [V, C]
//   model.layers.<l>.input_layernorm.weight [C]   = h.<l>.ln1.weight [C]
//   ...self_attn.q_proj.weight [H*d, C]   | h.<l>.attn.qkv.weight [C, 3, C] (q | k | v), or with
//   ...self_attn.k_proj.weight [KV*d, C]  | KV < H [C, KV, H/KV + 2, d] (group j: query heads
//   ...self_attn.v_proj.weight [KV*d, C]  | j*H/KV .. (j+1)*H/KV - 1, then k head j, v head j)
//   ...self_attn.o_proj.weight [C, H*d]           = h.<l>.attn.proj.weight^T [H*d, C]
//   ...post_attention_layernorm.weight [C]        = h.<l>.ln2.weight [C]
//   ...mlp.gate_proj.weight [F, C]  | h.<l>.mlp.fc.weight [C, 2, F] (0: gate, 1: up)
//   ...mlp.up_proj.weight [F, C]    |
//   ...mlp.down_proj.weight [C, F]                = h.<l>.mlp.proj.weight^T [F, C]
//   model.norm.weight [C]                         = ln_f.weight [C]
//   lm_head.weight [V, C]                         = lm_head.weight [V, C] (untied models only)
// RoPE: axonn rotates interleaved pairs (2i, 2i+1) of a head, HF's Llama halves (i, i + d/2),
// and HF stores q_proj's and k_proj's rows permuted to match (Meta's conversion script:
// w.view(n, d/2, 2, C).transpose(1, 2).reshape(n*d, C)): within a head, HF row r < d/2 is
// interleaved row 2r and HF row d/2 + r is interleaved row 2r + 1. Import undoes that, export
// redoes it; v_proj is not permuted.
#include <cstdint>
#include <string>
#include <vector>

#include "layout/layout_inputs.hpp"

namespace axonn {

// One tensor of the HF checkpoint and the axonn parameter it is exported from.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string axonn_source;
};

// One axonn parameter and the HF tensors it is imported from, in the order hf_to_axonn takes
// them (q, k, v; gate, up; else one).
struct AxonnFromHf {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<std::string> hf_sources;
};

// The HF tensors of `model` in transformers' state_dict order: embed_tokens, per layer q, k,
// v, o, gate, up, down, input_layernorm, post_attention_layernorm, then norm and lm_head.
// require_llama_form's ConfigError (hf_config.hpp) for a model without a Llama form.
std::vector<HfTensor> hf_llama_tensors(const ModelShape& model);

// Every parameter of `model`, named and shaped and in the order gpt_parameters lists them.
// ConfigError as hf_llama_tensors.
std::vector<AxonnFromHf> axonn_llama_tensors(const ModelShape& model);

// Writes axonn parameter `axonn_name` (out: its shape's element count, row-major) from its HF
// sources (hf_sources[i]: AxonnFromHf::hf_sources[i], each its HfTensor shape, row-major).
// std::invalid_argument for a name that is no parameter of `model` or the wrong source count.
void hf_to_axonn(const std::string& axonn_name, const std::vector<const float*>& hf_sources, float* out,
                 const ModelShape& model);

// Writes HF tensor `hf_name` (out: its shape's element count) from the whole axonn parameter
// HfTensor::axonn_source names. std::invalid_argument for a name that is no tensor of `model`.
void axonn_to_hf(const std::string& hf_name, const float* axonn_source, float* out, const ModelShape& model);

// The interleaved element (axonn's) that HF row r of a rotated head of size d holds.
inline int64_t interleaved_of_hf_row(int64_t r, int64_t d) { return r < d / 2 ? 2 * r : 2 * (r - d / 2) + 1; }

}  // namespace axonn
