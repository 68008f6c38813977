#pragma once
// `axonn ckpt import-hf` and `axonn ckpt export-hf`: Hugging Face LlamaForCausalLM weights into
// an axonn checkpoint and back (docs/llama.md, "Hugging Face weights"). The model knowledge is
// in runner/hf (config.json, the tensor map); these files read, check and write.
#include "runner/cli/commands.hpp"

namespace axonn {

// axonn ckpt import-hf MODEL_DIR --job JOB.toml -o CKPT_DIR
int ckpt_import_hf(const CommandArgs& args);
// axonn ckpt export-hf CKPT_DIR -o MODEL_DIR [--step N]
int ckpt_export_hf(const CommandArgs& args);

}  // namespace axonn
