#pragma once
// The tensor names `axonn ckpt export --names` writes. The checkpoint library exports any
// slabs under any names (checkpoint/safetensors.hpp); this file knows the GPT's tensors and
// another program's names for them.
//
// --names mixtral: the MoE tensors under the names and the nn.Linear convention ([out, in],
// transposed from axonn's x·W [in, out]) of Hugging Face's MixtralForCausalLM, one tensor per
// expert; every other tensor keeps its axonn name. For MoE block l, C hidden, E experts:
//   h.<l>.mlp.router.weight [C, E]            -> model.layers.<l>.block_sparse_moe.gate.weight [E, C]
//   h.<l>.mlp.experts.fc.weight[e] [C, 4C]    -> model.layers.<l>.block_sparse_moe.experts.<e>.w1.weight [4C, C]
//   h.<l>.mlp.experts.fc.bias[e] [4C]         -> ...experts.<e>.w1.bias [4C]
//   h.<l>.mlp.experts.proj.weight[e] [4C, C]  -> ...experts.<e>.w2.weight [C, 4C]
//   h.<l>.mlp.experts.proj.bias[e] [C]        -> ...experts.<e>.w2.bias [C]
// SwiGLU experts (model.mlp = "swiglu", Mixtral's shape) hold fc as [E, C, 2, F], gate then
// up, and its bias as [E, 2, F]; the gate is Mixtral's w1 and the up projection its w3:
//   h.<l>.mlp.experts.fc.weight[e][:, 0] [C, F] -> ...experts.<e>.w1.weight [F, C]
//   h.<l>.mlp.experts.fc.weight[e][:, 1] [C, F] -> ...experts.<e>.w3.weight [F, C]
// (GELU experts have no w3.) The AdamW moments (adam.m/..., adam.v/...) keep their names: no
// loader reads them.
#include <string>
#include <vector>

#include "checkpoint/safetensors.hpp"
#include "checkpoint/tensor_table.hpp"

namespace axonn {

enum class ExportNames { axonn, mixtral };

// "axonn" or "mixtral"; UsageError naming the value and both choices otherwise.
ExportNames parse_export_names(const std::string& value);

struct NamedExport {
  std::vector<ExportTensor> entries;  // any order: the writer sorts them by name
  int moe_blocks_renamed = 0;         // blocks l with some tensor under a Mixtral name
};

// The entries that export `tensors` (the checkpoint's, or the ones --only keeps) under
// `names`. Pure. FormatError for an MoE tensor whose rank is not the one above.
NamedExport export_entries(const std::vector<TensorInfo>& tensors, ExportNames names);

}  // namespace axonn
