#pragma once
// The token embedding and the LM head, which share wte [V, C] (GPT-2's tied weights), both
// vocab-parallel. On this rank (c = C/G_x, v = V/G_y, rows [v0, v0 + v) of the vocabulary):
//   wte shard [v, c/G_z] (the lm_head's xy shard, stored transposed: [V, C] like the
//   checkpoint); gathered over z into [v, c] once per micro-batch for both uses.
//   embed:  out (m, c) = wte rows of the tokens in range, all-reduced over y
//   logits: (m, v) = x (m, c) · wte_g^T, all-reduced over x (the head's forward all-reduce)
// wte is read in the activations' type (Gpt's copy of the weights); its gradient is float32.
// Backward: dx (m, c) = dlogits · wte_g, all-reduced over y, and the head's dW = dlogits^T ·
// x (v, c) beside that all-reduce with overlap (OAR); at the end of the micro-batch the
// embedding's scatter-add joins the head's dW, and with G_z > 1 the sum is reduce-scattered
// over z once (docs/parallel-plan.md: one all-gather and one reduce-scatter of wte per
// micro-batch).
#include <cstdint>

#include "comm/comm_grid.hpp"
#include "trainer/backend.hpp"
#include "trainer/model/sharded_linear.hpp"
#include "trainer/model/z_gather.hpp"

namespace axonn {

class TiedEmbedding {
 public:
  // weight: the wte shard as the GEMMs read it; grad: its gradient in the flat buffer.
  // gathered ([v · c] of the weight's type) and staging ([v · c] float32) when G_z > 1, else
  // null: staging receives the raw z-blocks of the all-gather (in the weight's type), and in
  // the backward holds the head's dW [v, c] until weight_backward. overlap, chunks: as
  // ShardedLinear's, for the logits' all-reduce over x and dx's over y.
  TiedEmbedding(Backend& backend, CommGrid& grid, int64_t vocab, int64_t hidden, ConstActPtr weight, float* grad,
                ActPtr gathered, float* staging, bool overlap = false, int64_t chunks = 1);

  int64_t v_local() const { return v_; }
  int64_t v0() const { return v0_; }

  // As ShardedLinear's: start the z all-gather beside compute, or run / finish it.
  void prefetch_weight();
  void gather_weight();
  void embed(const int32_t* tokens, ActPtr out, int64_t m);
  void logits(ConstActPtr x, ActPtr logits, int64_t m);
  // The head's backward: dx (m, c) = dlogits · wte_g summed over y, and its dW = dlogits^T ·
  // x_head (m, c) kept for weight_backward (in the gradient when G_z = 1, else in staging).
  void logits_backward(ConstActPtr dlogits, ConstActPtr x_head, ActPtr dx, int64_t m);
  // wte grad += the head's dW + the rows of d_embedded at `tokens`, summed over z (through
  // `scatter`: flush it before reading the gradient).
  void weight_backward(ConstActPtr d_embedded, const int32_t* tokens, int64_t m, GradScatter& scatter);

 private:
  ConstActPtr full() const { return z_ > 1 ? gathered_ : weight_; }           // [v, c]
  ActPtr gather_staging() const { return ActPtr(staging_, weight_.type()); }  // [G_z][v][c/G_z]

  Backend& backend_;
  CommGrid& grid_;
  int64_t v_, c_, v0_, z_;
  ConstActPtr weight_;
  float* grad_;
  ActPtr gathered_;
  float* staging_;
  bool overlap_;
  int64_t chunks_;
  ZGather gather_;  // weight_ -> staging_ (G_z > 1)
};

}  // namespace axonn
