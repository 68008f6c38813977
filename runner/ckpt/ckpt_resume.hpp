#pragma once
// What `axonn train` reads when it resumes a checkpoint at some layout, without a trainer:
// the model from the checkpoint's model_config text, and per rank of the new layout the
// rectangle of every parameter and of both AdamW moments that the rank owns, or of the
// moments its piece of them when the optimizer is sharded (TrainingCheckpoint::load reads
// exactly these). `axonn ckpt plan` feeds them to plan_reads.
#include <string>
#include <vector>

#include "checkpoint/read_plan.hpp"
#include "checkpoint/tensor_table.hpp"
#include "layout/layout.hpp"

namespace axonn {

// The inverse of model_config_text: "layers=2 hidden=64 heads=4 vocab=256 sequence=64", and a
// Llama-shaped model's architecture keys ("norm=rmsnorm mlp=swiglu ... tie_embeddings=false").
// FormatError naming `file` and the offending token for anything else: an unknown, missing
// or repeated key, a value that is not a positive integer, another spelling or order.
ModelShape parse_model_config(const std::string& text, const std::string& file);

// Every tensor the trainer reads for `model` (parameters, "adam.m/<name>", "adam.v/<name>")
// must be in `table` with the global shape gpt_parameters gives it. RequestMismatch naming
// the tensor, both shapes and `file` otherwise.
void check_model_tensors(const std::vector<TensorInfo>& table, const ModelShape& model, const std::string& file);

// requests[r]: the rectangles rank r of `layout` reads on resume, in the trainer's order
// (parameters, then adam.m, then adam.v; gpt_parameters order within each: state_slices),
// with the optimizer sharded over data (shard_optimizer, G_data > 1: each data rank reads
// its pieces of the moments) or not. LayoutError when `layout` does not divide the model.
std::vector<std::vector<RectRequest>> resume_requests(const ModelShape& model, const Layout& layout,
                                                      bool shard_optimizer = false);

}  // namespace axonn
