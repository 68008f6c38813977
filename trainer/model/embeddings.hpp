#pragma once
// The token embedding and the LM head, both vocab-parallel: sharing wte [V, C] (GPT-2's tied
// weights), or the head with its own lm_head [V, C] sharded alike (model.tie_embeddings =
// false, Llama). On this rank (c = C/G_x, v = V/G_y, rows [v0, v0 + v) of the vocabulary):
//   wte shard [v, c/G_z] (the lm_head's xy shard, stored transposed: [V, C] like the
//   checkpoint); gathered over z into [v, c] once per micro-batch, for both uses when tied;
//   untied, the head's weight is gathered into the same buffer after the embedding ran.
//   embed:  out (m, c) = wte rows of the tokens in range, all-reduced over y
//   logits: (m, v) = x (m, c) · head_g^T, all-reduced over x (the head's forward all-reduce)
// The weights are read in the activations' type (Gpt's copy of the weights); their gradients
// are float32. Backward: dx (m, c) = dlogits · head_g, all-reduced over y, and the head's dW =
// dlogits^T · x (v, c) beside that all-reduce with overlap (OAR). Tied, at the end of the
// micro-batch the embedding's scatter-add joins the head's dW, and with G_z > 1 the sum is
// reduce-scattered over z once (docs/parallel-plan.md: one all-gather and one reduce-scatter
// of wte per micro-batch); untied, each weight has its own of both.
#include <cstdint>

#include "comm/comm_grid.hpp"
#include "trainer/backend.hpp"
#include "trainer/model/sharded_linear.hpp"
#include "trainer/model/z_gather.hpp"

namespace axonn {

class Embeddings {
 public:
  struct Weight {
    ConstActPtr weight = nullptr;  // the shard as the GEMMs read it
    float* grad = nullptr;         // its gradient in the flat buffer
  };
  // wte; head: lm_head's, or {} when tied (the head reads wte). gathered ([v · c] of the
  // weights' type) and staging ([v · c] float32) when G_z > 1, else null: staging receives the
  // raw z-blocks of the all-gathers (in the weights' type), and in the backward holds a dW
  // [v, c] on its way to the reduce-scatter. overlap, chunks: as ShardedLinear's, for the
  // logits' all-reduce over x and dx's over y.
  Embeddings(Backend& backend, CommGrid& grid, int64_t vocab, int64_t hidden, Weight wte, Weight head,
             ActPtr gathered, float* staging, bool overlap = false, int64_t chunks = 1);

  int64_t v_local() const { return v_; }
  int64_t v0() const { return v0_; }
  bool tied() const { return !head_.weight; }

  // As ShardedLinear's, for wte: start the z all-gather beside compute, or run / finish it.
  void prefetch_weight();
  void gather_weight();
  // The same for the head's own weight, into the buffer wte was gathered in: after embed()
  // (nothing when tied: wte is already there).
  void prefetch_head();
  void gather_head();
  void embed(const int32_t* tokens, ActPtr out, int64_t m);
  void logits(ConstActPtr x, ActPtr logits, int64_t m);
  // The head's backward: dx (m, c) = dlogits · head_g summed over y, and its dW = dlogits^T ·
  // x_head (m, c). Tied, dW is kept for weight_backward (in the gradient when G_z = 1, else in
  // staging); untied, it goes to lm_head's gradient (summed over z through `scatter`).
  void logits_backward(ConstActPtr dlogits, ConstActPtr x_head, ActPtr dx, int64_t m, GradScatter& scatter);
  // wte grad += (tied: the head's dW +) the rows of d_embedded at `tokens`, summed over z
  // (through `scatter`: flush it before reading the gradient).
  void weight_backward(ConstActPtr d_embedded, const int32_t* tokens, int64_t m, GradScatter& scatter);

 private:
  ConstActPtr head_full() const;                                               // [v, c]
  ConstActPtr wte_full() const { return z_ > 1 ? gathered_ : wte_.weight; }   // [v, c]
  ActPtr gather_staging() const { return ActPtr(staging_, wte_.weight.type()); }  // [G_z][v][c/G_z]
  // gathered_ [v, c] from the z-major blocks the all-gather left in staging.
  void unstage();
  // dW [v, c] in staging, summed over z into `grad` through `scatter` (z-major blocks first).
  void scatter_staged(float* grad, GradScatter& scatter);

  Backend& backend_;
  CommGrid& grid_;
  int64_t v_, c_, v0_, z_;
  Weight wte_, head_;
  ActPtr gathered_;
  float* staging_;
  bool overlap_;
  int64_t chunks_;
  ZGather gather_, head_gather_;  // each weight -> staging_ (G_z > 1)
};

}  // namespace axonn
