#pragma once
// The 4D-parallel GPT-2 of one rank: token + learned position embeddings, pre-LayerNorm
// blocks (causal multi-head attention, 4x GELU MLP), final LayerNorm, tied LM head,
// cross-entropy. Every collective is the one docs/parallel-plan.md lists, so the bytes the
// grid counts equal the layout model's prediction.
//
// Shapes on this rank (m = mb·T tokens of one micro-batch, c = C/G_x, cy = C/G_y,
// h = H/G_y heads of size d = C/H, v = V/G_y):
//   residual stream [m, c] (replicated over y), qkv [m, 3cy] packed q|k|v per token,
//   attention log-sum-exp [mb, h, T] (no T×T matrix), attention output [m, cy], MLP hidden [m, 4cy],
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
#include "trainer/model/moe_layer.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/model/sharded_linear.hpp"
#include "trainer/model/tied_embedding.hpp"
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

  Backend& backend_;
  DeviceArena arena_;  // every activation and scratch buffer, allocated in the constructor
  CommGrid& grid_;
  ModelShape model_;
  ParameterStore& params_;
  int64_t mb_, m_, c_, cy_, heads_, head_dim_;
  bool overlap_comm_;
  Recompute recompute_;
  size_t gathered_sets_ = 0;  // blocks whose gathered weights are held at once (block l uses set l mod this)

  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<TiedEmbedding> embedding_;
  GradScatter scatter_;           // the dW reduce-scatters over z (G_z > 1)
  std::vector<ActPtr> residual_;  // [L+1] of [m, c]: input of block l, and the final one
  // Final LayerNorm and head.
  ActPtr lnf_out_, logits_;
  float *lnf_mean_, *lnf_rstd_;
  CrossEntropyBuffers ce_{};
  // Backward working buffers, reused by every block.
  ActPtr d_residual_, d_normed_, d_mlp_, d_attention_, d_qkv_;
  float* ln_partials_;
};

}  // namespace axonn
