#pragma once
// bench_ops_gpu --attention: causal attention in bf16 on GPU 0, ours (Backend::attention_forward
// and attention_backward, the trainer's kernels) against PyTorch's SDPA with its FlashAttention-2
// kernel (bench/ops_gpu_attention_torch.py), in the same call, at FlashAttention-2's benchmark
// shapes: --attention-tokens B·T tokens (16384) of --attention-hidden h·d (2048), for each
// sequence T of --attention-seqs and each head size d of --attention-head-dims (64, 128).
// q, k and v are three (B, T, h, d) buffers on both sides (PyTorch's a (B, h, T, d) view of
// each, as a model's q.view(B, T, h, d).transpose(1, 2) gives it).
//
// FLOPs as FlashAttention-2's paper counts them: the forward's two products 4·B·h·T²·d,
// halved by the causal mask; the backward 2.5 times the forward. Each time is the median of 5
// rounds of --calls calls. Goal: ours at least SDPA's rate (1.0x), forward and backward, at
// every shape.
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/backend.hpp"

namespace axonn::bench {

struct AttentionOptions {
  int64_t tokens = 16384;  // B·T
  int64_t hidden = 2048;   // h·d
  std::vector<int64_t> sequences = {512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int64_t> head_dims = {64, 128};
  int calls = 20;
  std::string python = "python3";
  bool torch = true;
};

// Times every shape on `backend` (bf16 activations) and PyTorch's side, and prints the table.
void run_attention_vs_torch(Backend& backend, const AttentionOptions& o);

}  // namespace axonn::bench
