#pragma once
// The models bench_train_gpu (and its --fit) trains on one GPU, by name, and the
// activation recomputation the chooser picks for one of them on this GPU.
#include <sstream>
#include <string>
#include <vector>

#include "layout/layout.hpp"
#include "layout/layout_inputs.hpp"
#include "layout/layout_memory.hpp"
#include "runner/cli/args.hpp"

namespace axonn::bench {

struct GpuModel {
  std::string name;
  ModelShape shape;
};

// Llama's shape at T = `sequence`: RMSNorm, SwiGLU of `mlp_hidden`, RoPE (theta 500000),
// `kv_heads` key/value heads, no biases, the head tied to the embedding.
inline ModelShape llama_shape(int layers, int hidden, int heads, int kv_heads, int mlp_hidden, int vocab,
                              int sequence) {
  ModelShape m{layers, hidden, heads, vocab, sequence};
  m.norm = Norm::rmsnorm;
  m.mlp = Mlp::swiglu;
  m.mlp_hidden = mlp_hidden;
  m.positions = Positions::rope;
  m.rope_theta = 500000.0;
  m.kv_heads = kv_heads;
  m.bias = false;
  return m;
}

// GPT-2 small, medium and XL at T = 1024, vocabulary 50257 padded to a multiple of 128
// (job_templates/gpt2-124m.toml); XL is llm.c's headline model. Llama 3.2 1B (1.24B
// parameters: 16 layers, hidden 2048, 32 query heads sharing 8 key/value heads, SwiGLU of
// 8192, vocabulary 128256) at T = 1024: the Llama family's kernels at a size where they run as
// in training. tiny and llama-tiny are smoke tests of the programs (seconds), not measurements.
inline const std::vector<GpuModel>& gpu_models() {
  static const std::vector<GpuModel> models = {
      {"124m", {12, 768, 12, 50304, 1024}},  {"350m", {24, 1024, 16, 50304, 1024}},
      {"1.5b", {48, 1600, 25, 50304, 1024}}, {"llama-1b", llama_shape(16, 2048, 32, 8, 8192, 128256, 1024)},
      {"tiny", {2, 64, 2, 256, 64}},         {"llama-tiny", llama_shape(2, 64, 4, 2, 96, 256, 64)},
  };
  return models;
}

// The models a comma-separated list names ("both": 124m,350m). UsageError naming the unknown
// name and the known ones.
inline std::vector<GpuModel> gpu_models_named(const std::string& list) {
  std::vector<GpuModel> out;
  std::stringstream words(list == "both" ? "124m,350m" : list);
  for (std::string word; std::getline(words, word, ',');) {
    bool found = false;
    for (const GpuModel& m : gpu_models())
      if (m.name == word) {
        out.push_back(m);
        found = true;
      }
    if (!found) {
      std::string known = "both";
      for (const GpuModel& m : gpu_models()) known += ", " + m.name;
      throw UsageError("option '--model' names '" + word + "'; known: " + known + " (several: a comma-separated list)");
    }
  }
  if (out.empty()) throw UsageError("option '--model' names no model");
  return out;
}

// What the chooser reads to pick a one-rank job's memory modes on a GPU of `memory_bytes`:
// the model at `micro_batch` sequences per micro-batch, bf16 (training.dtype = "bfloat16"),
// recomputation "auto".
inline ChooserInput one_gpu_input(const ModelShape& shape, int batch, int micro_batch, double memory_bytes) {
  ChooserInput input;
  input.model = shape;
  input.batch = {batch, micro_batch, ElementType::bfloat16};
  input.machine.memory_bytes = memory_bytes;
  return input;
}

// training.recompute = "auto" on one GPU of `memory_bytes`: the least recomputation whose
// predicted memory fits (resolved_recompute), and why (recompute_reason).
struct ChosenRecompute {
  Recompute mode = Recompute::none;
  std::string reason;
};
inline ChosenRecompute chosen_recompute(const ModelShape& shape, int batch, int micro_batch, double memory_bytes) {
  const ChooserInput input = one_gpu_input(shape, batch, micro_batch, memory_bytes);
  return {resolved_recompute(input, Layout{}), recompute_reason(input, Layout{})};
}

// "none", "attention" or "block" as a mode; UsageError otherwise.
inline Recompute recompute_named(const std::string& name) {
  for (const Recompute mode : kRecomputeModes)
    if (name == recompute_name(mode)) return mode;
  throw UsageError("option '--recompute' must be auto, none, attention or block, got '" + name + "'");
}

}  // namespace axonn::bench
