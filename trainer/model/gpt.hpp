#pragma once
// The 4D-parallel transformer of one rank, GPT-2 or Llama-shaped (ModelShape): token
// embedding (and learned positions, or RoPE on q and k), pre-normalization blocks (LayerNorm
// or RMSNorm; causal attention, multi-head or grouped-query; a GELU or SwiGLU MLP), final
// normalization, LM head (tied to wte or its own), cross-entropy. Every collective is the one
// docs/parallel-plan.md lists, so the bytes the grid counts equal the layout model's prediction.
//
// Shapes on this rank (m = mb·T tokens of one micro-batch, c = C/G_x, cy = C/G_y,
// h = H/G_y query heads and kv = KV/G_y key/value heads of size d = C/H, f = F/G_y, v = V/G_y):
//   residual stream [m, c] (replicated over y); qkv [m, (h + 2kv)·d]: [q | k | v] (MHA), or
//   per key/value head [its h/kv query heads | k | v] (grouped, parameters.hpp);
//   attention log-sum-exp [mb, h, T] (no T×T matrix), attention output [m, cy];
//   MLP pre-activation [m, f] (SwiGLU's gate | up, [m, 2f]) and activation [m, f];
//   logits [m, v] (vocab-parallel over y).
//
// Activation recomputation (training.recompute, layout_inputs.hpp's Recompute): "attention"
// keeps one set of q, k, v, log-sum-exp and attention output for every block, "block" one
// set of every saved activation but the block inputs (and one or two blocks' gathered
// weights); the backward reruns what a block needs (recompute()) before the block's own
// backward, except for the last block, whose activations are still in place. The rerun ops
// are the forward's, on the same inputs, so every mode gives the same bits.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_grid.hpp"
#include "layout/layout_inputs.hpp"
#include "trainer/backend.hpp"
#include "trainer/model/device_arena.hpp"
#include "trainer/model/dist_ops.hpp"
#include "trainer/model/embeddings.hpp"
#include "trainer/model/moe_layer.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/model/row_norm.hpp"
#include "trainer/model/sharded_linear.hpp"
#include "trainer/optim/gradient_sync.hpp"

namespace axonn {

class Gpt {
 public:
  // micro_batch: sequences per forward/backward (mb). Allocates every activation and
  // scratch buffer for it once.
  // overlap_comm: the forward's z all-gathers all start at its beginning and run beside
  // compute (each layer waits for its own), as training.overlap_comm asks; with block
  // recomputation, whose blocks take turns on two sets of gathered weights, each block's
  // gathers start when the block before the previous one is done (forward) or when the
  // backward of the block after it starts (its rerun). tp_chunks: training.tp_chunks, the
  // row chunks of the linear layers' x and y all-reduces (ShardedLinear); it divides mb·T.
  Gpt(Backend& backend, CommGrid& grid, const ModelShape& model, int micro_batch, ParameterStore& params,
      bool overlap_comm = false, Recompute recompute = Recompute::none, int64_t tp_chunks = 1);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  int64_t tokens() const { return m_; }  // m = mb·T
  Recompute recompute() const { return recompute_; }

  // One micro-batch: forward, loss, backward. tokens, targets: (mb, T) int32 on the device.
  // Parameter gradients accumulate (+=); dloss/dlogit uses loss_scale per token (1 / tokens
  // in the global batch for a mean). loss_sum[0] += the sum of the per-token losses.
  // sync: on the step's last micro-batch, told of each block whose weight gradients are
  // final (GradientSync::block_done, blocks L-1 down to 0); else null.
  void forward_backward(const int32_t* tokens, const int32_t* targets, float loss_scale, float* loss_sum,
                        GradientSync* sync = nullptr);

  // One micro-batch's loss without its gradient (a held-out evaluation): the forward only;
  // loss_sum[0] += the sum of the per-token losses. Parameters, gradients and optimizer
  // state are untouched.
  void evaluate(const int32_t* tokens, const int32_t* targets, float* loss_sum);

  // The MoE blocks' routing since the last reset, summed over the blocks (micro_batches
  // counts each block's); all zero for a dense model.
  MoeStatistics moe_statistics() const;
  void reset_moe_statistics();

 private:
  struct Block;
  // The GEMMs' copy of the sharded weight `name` (wte, a block's linear weight).
  ConstActPtr weight(const std::string& name) const;
  // Through the loss and its gradient at the logits (the classifier's softmax backward runs
  // with its forward: logits_ holds dlogits on return).
  void forward(const int32_t* tokens, const int32_t* targets, float loss_scale);
  void backward(const int32_t* tokens, GradientSync* sync);
  // Starts block l's four z all-gathers (overlap).
  void prefetch_block(size_t l);
  // Reruns what block l's backward reads and the mode did not keep: attention, the qkv GEMM
  // and the attention; block, the block's forward from its input up to the GELU, gathering
  // its weights again.
  void recompute(size_t l);

  // Where k and v start after q in a packed qkv row, its row stride, and the stride from one
  // key/value head's group to the next (head_dim_ for MHA's [q | k | v]).
  struct HeadViews {
    int64_t k, v, ld, group_stride;
  };
  HeadViews head_views() const;
  // Block b's attention on its qkv_out, and its backward into d_qkv_.
  void attend(const Block& b);
  void attend_backward(const Block& b);
  // RoPE on the q and k of a packed qkv buffer, or its transpose on their gradients; nothing
  // with learned positions.
  void rotate(ActPtr qkv, bool backward);
  // The MLP's first layer and its activation (GELU or SwiGLU).
  void mlp_in(Block& b);

  Backend& backend_;
  DeviceArena arena_;  // every activation and scratch buffer, allocated in the constructor
  CommGrid& grid_;
  ModelShape model_;
  ParameterStore& params_;
  RowNorm norm_;
  int64_t mb_, m_, c_, cy_, heads_, kv_heads_, head_dim_;
  int64_t qkv_local_, fc_local_, ffn_local_;  // (h + 2kv)·d, mlp.fc's output width and f
  float* rope_cos_sin_ = nullptr;             // [T, d/2, 2] under RoPE (rope_table.hpp)
  bool overlap_comm_;
  Recompute recompute_;
  size_t gathered_sets_ = 0;  // blocks whose gathered weights are held at once (block l uses set l mod this)

  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<Embeddings> embedding_;
  GradScatter scatter_;           // the dW reduce-scatters over z (G_z > 1)
  std::vector<ActPtr> residual_;  // [L+1] of [m, c]: input of block l, and the final one
  // Final normalization and head.
  ActPtr lnf_out_, logits_;
  float *lnf_mean_, *lnf_rstd_;
  CrossEntropyBuffers ce_{};
  // Backward working buffers, reused by every block: d_mlp_ [m, fc], d_act_ [m, f] (SwiGLU's
  // activation gradient, before its backward), d_qkv_ laid out as qkv.
  ActPtr d_residual_, d_normed_, d_mlp_, d_act_ = nullptr, d_attention_, d_qkv_;
  float* ln_partials_;
};

}  // namespace axonn
