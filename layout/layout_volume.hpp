#pragma once
// Bytes each rank moves per optimizer step, per (axis, collective kind): the prediction
// the trainer's communicator counters must match exactly (docs/parallel-plan.md).
//
// Bytes per element (collective_types): weights gathered over z and activations (the tensor
// axes' all-reduces) move in the job's dtype, e = 4 (float32) or 2 (bfloat16); gradients and
// statistics move in float32, 4 bytes, whatever the dtype.
// Per micro-batch (A per step, m = mb*T tokens), for every linear layer (k, n, k-axis a, n-axis b;
// the LM head's k is C over x and n is V over y):
//   all_gather     z : k/G_a * n/G_b * e      forward: the z-shards of W
//   all_reduce     a : m * n/G_b * e          forward: partial Y
//   all_reduce     b : m * k/G_a * e          backward: partial dX (overlapped: beside the layer's dW GEMM)
//   reduce_scatter z : k/G_a * n/G_b * 4      backward: dW back to z-shards
// and further:
//   all_reduce     y : m * C/G_x * e          token embedding (vocab-parallel lookup)
//   all_reduce     x : 2 calls of m * 4       each LayerNorm forward (mean, then variance)
//   all_reduce     x : m * 2 * 4              each LayerNorm backward; 2L+1 LayerNorms
//   all_gather     y : m * G_y * 4            loss: row maxima of the logits
//   all_reduce     y : m * 2 * 4              loss: sum of exp and target logit
// Recomputation (per micro-batch, for each of the L - 1 recomputed blocks, model_plan.hpp):
//   attention: all_reduce x : m * 3C/G_y * e     the qkv GEMM's partial output again
//   block:     all_gather z : every block layer's k/G_a * n/G_b * e (the gathered weights are
//                             not kept: the rerun forward gathers them again),
//              all_reduce a : m * n/G_b * e for qkv, attn.proj and mlp.fc (mlp.proj's output
//                             is the next block's input, kept: its GEMM is not rerun),
//              all_reduce x : 4 calls of m * 4 (ln1 and ln2 forward)
// MoE blocks, per block and micro-batch (docs/moe.md; P = E_p, E_l = E/P local experts,
// k = top_k, c = C/G_x, h = 4C/G_y, R = MoeShape::rows, R_r = the rows this rank's experts
// receive: R at P = 1, and with a capacity; dropless at P > 1 its mean over the expert group R):
//   all_reduce     x : m * E * 4              router logits
//   all_reduce   z, data : (2E + 1) * 4       routing statistics
//   all_gather     z : 2 E_l calls of c * h * e   each local expert's fc and proj
//   all_to_all expert : E * 4                 (P > 1) the routed row counts, E_l per peer
//   all_to_all expert : R * c * e             (P > 1) the rows to the experts' ranks
//   all_to_all expert : R_r * c * e           (P > 1) the experts' outputs back
//   all_reduce     x : 2 calls of R_r * h * e fc output, proj's input gradient (overlapped: beside
//                      proj's dW GEMMs)
//   all_reduce     y : 2 calls of R_r * c * e proj output, fc's input gradient (overlapped: beside
//                      fc's dW GEMMs)
//   all_reduce     x : m * k * 4              the gates' gradient
//   all_to_all expert : R * c * e, R_r * c * e  (P > 1) the rows' gradients out and back
//   reduce_scatter z : 2 E_l calls of c * h * 4   each local expert's dW
// An all-to-all's bytes are the rank's whole send buffer, its own block included.
// Per step:
//   all_reduce     z : small * 4              gradients of LayerNorm, biases, wpe, routers
//   all_reduce     z : small.experts * 4      (MoE) the local experts' biases
//   all_reduce  data : L calls of one block's weight shards * 4 (an MoE block's attention
//                      weights), then the wte shard * 4 and small * 4;
//   all_reduce    RA : (MoE) per MoE block its local experts' weights * 4, then
//                      small.experts * 4, RA = expert_data with P > 1, else data: every
//                      gradient once, in L + 2 (+ MoE blocks + 1) buckets (model_plan.hpp,
//                      GradientBuckets; gradient_sync.hpp);
//                      with the optimizer sharded (MemoryModes, P = 1 only) instead, per bucket
//                      padded to G_data pieces (model_plan.hpp, padded_bucket):
//   reduce_scatter data : padded bucket * 4    the gradients, each rank summing its piece
//   all_gather     data : padded bucket * 4    the updated float32 weights, after AdamW (in a
//                         bfloat16 job * e for the weight buckets: their bf16 copy, the
//                         float32 master weights being sharded too)
//   all_reduce world : 4 * 4                  loss sum, token count, squared grad norm, stop votes
// A collective on a group of one is not made and counts nothing.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "layout/collective.hpp"
#include "layout/layout.hpp"

namespace axonn {

struct CollectiveVolume {
  int64_t calls = 0;
  int64_t bytes = 0;  // nccl-tests size, summed over the calls
};

// `calls` collectives of `bytes` each, as the step makes them: what the cost model prices call
// by call (a size picks the piece of a piecewise fit). overlapped: with training.overlap_comm
// the trainer starts them ahead of the compute that needs them, or beside the compute after
// the one that produced them, so part of their time can hide behind it:
//   z all-gathers of the weights (prefetched: the forward's all at its start, with block
//     recomputation the next block's beside the current one),
//   z reduce-scatters of dW (beside the layers below),
//   x and y all-reduces of dX in the backward (OAR: each beside its layer's dW GEMM, `beside`),
//   data all-reduces (or reduce-scatters) of blocks L-1..1's buckets (beside the backward
//     below them; block 0's, the wte's and the small tensors' start when it is done),
//   data all-gathers of blocks L-1..1's updated weights (beside the next bucket's AdamW).
struct CollectiveCalls {
  CommAxis axis;
  CollectiveKind kind;
  int64_t calls = 0;
  int64_t bytes = 0;  // each
  bool overlapped = false;
  // Overlapped calls that each run beside one GEMM of this shape and nothing else: 2·m·k·n
  // FLOPs at its rate cap what each can hide. Empty (m = 0) for those beside the step's compute.
  GemmShape beside{};
};

struct StepVolume {
  // [axis][kind]
  std::array<std::array<CollectiveVolume, kCollectiveKindCount>, kCommAxisCount> table{};
  std::array<int, kCommAxisCount> group_size{};  // members of this axis' groups
  std::vector<CollectiveCalls> calls;            // the same collectives, by size
  // [axis][kind]: whether a rank's bytes there depend on the routing (a dropless MoE model
  // with E_p > 1: the rows R_r a rank's experts receive, MoeShape::rows_vary). The entry
  // predicts R_r's mean, so its calls are exact on every rank and its bytes summed over the
  // world are exactly world * the predicted bytes; a single rank's are not.
  std::array<std::array<bool, kCollectiveKindCount>, kCommAxisCount> varies_with_routing{};

  const CollectiveVolume& at(CommAxis a, CollectiveKind k) const {
    return table[static_cast<size_t>(a)][static_cast<size_t>(k)];
  }
  bool varies(CommAxis a, CollectiveKind k) const {
    return varies_with_routing[static_cast<size_t>(a)][static_cast<size_t>(k)];
  }
  // Marks (a, k) as varying with the routing; ignored on groups of one, as add is.
  void mark_varies(CommAxis a, CollectiveKind k);
  // Adds `calls` collectives of `bytes` each; ignored on groups of one.
  void add(CommAxis a, CollectiveKind k, int64_t calls, int64_t bytes, bool overlapped = false,
           GemmShape beside = {});
  int64_t bytes(CommAxis a) const;         // all kinds
  double wire_bytes(CommAxis a) const;     // sum of bus_factor * size: what one rank sends
};

// The element type each kind of data moves in, for a job's dtype (the table "Bytes per
// element" in docs/parallel-plan.md).
struct CollectiveTypes {
  ElementType weights;          // z all-gathers of W (the GEMMs' copy of the weights)
  ElementType activations;      // x and y all-reduces of Y and dX, the embedding's y all-reduce
  ElementType gradients;        // z reduce-scatters of dW, z and data all-reduces (or reduce-scatters) of gradients
  ElementType statistics;       // LayerNorm and loss reductions, the world all-reduce
  ElementType updated_weights;  // optimizer sharded: the data all-gathers of the weight buckets after AdamW
  ElementType updated_small;    // optimizer sharded: the data all-gather of the small tensors after AdamW
};
CollectiveTypes collective_types(ElementType dtype);

// "weights, activations and updated weights 2 bytes (bfloat16), gradients, statistics and
// updated small tensors 4 bytes (float32)", for `axonn layout --explain`.
std::string describe_collective_types(ElementType dtype);

// At `modes` (a recompute mode alone: unsharded); without them, at the modes this job runs
// at this layout (resolved_modes, layout_memory.hpp). The overlappable calls are marked
// overlapped where the job overlaps at this layout (overlaps_comm, comm_overlap.hpp), or as
// `overlap` says in the last form, which is how overlaps_comm prices the choice.
StepVolume predict_step_volume(const ChooserInput& input, const Layout& layout, MemoryModes modes);
StepVolume predict_step_volume(const ChooserInput& input, const Layout& layout);
StepVolume predict_step_volume(const ChooserInput& input, const Layout& layout, MemoryModes modes, bool overlap);

// A dropless MoE model's expert all-to-all bytes per step when every return call carries
// its worst case, the P·R rows a rank's experts can receive (MoeShape::expert_rows): an upper
// bound on any rank's, for checking one rank's count where predict_step_volume gives the
// world's mean. Equal to the prediction with a capacity; 0 without an expert axis.
int64_t expert_all_to_all_bound(const ChooserInput& input, const Layout& layout);

}  // namespace axonn
