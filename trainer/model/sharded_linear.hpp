#pragma once
// One 4D-parallel linear layer Y = X·W + b, W [k, n], as docs/parallel-plan.md defines it.
// The GEMMs read W in the activations' type (Gpt's copy of the weights); its gradient, the
// bias and the bias gradient are float32.
// Role: k split over `k_axis` (a), n over the other tensor axis (b), and the rows of each
// (a, b) block split again over z. Shapes on this rank:
//   W shard [k/(G_a·G_z), n/G_b]  (row-major, rows z-major, so a z all-gather concatenates)
//   W gathered over z [k/G_a, n/G_b], kept from forward to backward
//   X [m, k/G_a], Y [m, n/G_b], bias [n/G_b] (replicated over a and z)
// Collectives per micro-batch: all-gather W over z; all-reduce Y over a (forward);
// all-reduce dX over b; reduce-scatter dW over z (backward). With G_z = 1 the shard is used
// in place and dW accumulates straight into its gradient.
// Overlap (training.overlap_comm): the z all-gather can be prefetched, and the backward's
// all-reduce of dX over b runs beside the dW GEMM (AxoNN's OAR): the same collectives on the
// same buffers, so the same bits.
// Chunks (training.tp_chunks = c): where Y is summed over a (forward) or dX over b (backward),
// that GEMM runs in c chunks of m/c rows, each chunk's sum started as soon as its GEMM is done,
// beside the next chunk's GEMM (the last dX chunk's beside the dW GEMM; the last Y chunk's is
// waited for). Each element's GEMM sum over k is unchanged; a group of 2 adds the same two
// numbers; a larger group's ring splits a chunk differently from the whole, which moves the sum
// by float32 rounding (docs/parallel-plan.md, "Chunks"). Without overlap the chunks' sums run
// where they are issued.
#include <cstdint>

#include "comm/comm_grid.hpp"
#include "trainer/backend.hpp"
#include "trainer/model/grad_scatter.hpp"
#include "trainer/model/z_gather.hpp"

namespace axonn {

class ShardedLinear {
 public:
  // weight: this rank's shard as the GEMMs read it; grad: its gradient in the flat buffer;
  // bias, dbias: [n/G_b] or null. gathered: [k/G_a · n/G_b] of the weight's type, owned by
  // the caller when G_z > 1, else null. overlap: the all-reduces beside the GEMMs; chunks:
  // training.tp_chunks, which must divide every m passed to forward and backward.
  ShardedLinear(Backend& backend, CommGrid& grid, int64_t k, int64_t n, Axis k_axis, ConstActPtr weight, float* grad,
                const float* bias, float* dbias, ActPtr gathered, bool overlap = false, int64_t chunks = 1);

  int64_t k_local() const { return k_local_; }  // k/G_a
  int64_t n_local() const { return n_local_; }  // n/G_b

  // Starts the z all-gather of the weight beside compute (training.overlap_comm);
  // gather_weight() then only waits for it. Nothing when G_z = 1.
  void prefetch_weight();
  // All-gathers the weight over z into the gathered buffer, or finishes the prefetch
  // (nothing when G_z = 1).
  void gather_weight();
  // y (m, n/G_b) = x (m, k/G_a) · W, summed over a, plus bias. Call gather_weight() first.
  void forward(ConstActPtr x, ActPtr y, int64_t m);
  // forward into pre, then out = gelu(pre) (m, n/G_b): the MLP's first layer. One fused GEMM
  // when nothing is reduced before the bias (G_a = 1).
  void forward_gelu(ConstActPtr x, ActPtr pre, ActPtr out, int64_t m);
  // dx (m, k/G_a) = dy · W^T summed over b (skipped when dx is null); dW += x^T · dy summed
  // over z into this rank's rows (through `scatter`, maybe still in flight on return);
  // dbias += Σ_rows dy. With overlap the sum over b runs beside the dW GEMM; dx holds it on
  // return either way.
  // gelu_pre: the layer's input was x = gelu(gelu_pre); dx is then the gradient at gelu_pre,
  // dx ⊙ gelu'(gelu_pre) after the sum over b (in the dX GEMM when G_b = 1).
  void backward(ConstActPtr dy, ConstActPtr x, ActPtr dx, int64_t m, GradScatter& scatter,
                ConstActPtr gelu_pre = nullptr);

 private:
  ConstActPtr gemm_weight() const;  // the gathered weight when G_z > 1, else the shard
  // The bias joins the forward GEMM's epilogue when no all-reduce over a comes before it (G_a = 1).
  bool bias_in_epilogue() const;
  // The row chunks of a GEMM whose output `group` sums: training.tp_chunks, or 1 where the
  // group is a single rank (nothing is summed).
  int64_t chunks_of(const Communicator& group) const;
  // dW += x^T · dy (summed over z through `scatter` when G_z > 1), dbias += Σ_rows dy.
  void weight_backward(ConstActPtr dy, ConstActPtr x, int64_t m, GradScatter& scatter);

  Backend& backend_;
  CommGrid& grid_;
  Axis k_axis_, n_axis_;
  int64_t k_local_, n_local_, shard_rows_;
  ConstActPtr weight_;
  float* grad_;
  const float* bias_;
  float* dbias_;
  ActPtr gathered_;
  bool z_split_;
  bool overlap_;
  int64_t chunks_;
  ZGather gather_;  // weight_ -> gathered_ (G_z > 1)
};

}  // namespace axonn
