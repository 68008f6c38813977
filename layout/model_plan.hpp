#pragma once
// The model as the 4D plan sees it (docs/parallel-plan.md): the linear layers with their
// roles, the per-rank batch split, and the parameter counts per rank. Shared by the
// volume, memory and cost models, and by the trainer, so they cannot disagree.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "layout/layout.hpp"

namespace axonn {

// The linear layers as (shape, how many). Y = X*W, W: [k, n]. k_axis splits k (x for role
// "xy", y for role "yx"); the other tensor axis splits n; z splits the rows of each block
// again. Per block: attn.qkv (C -> (H + 2KV)·d, 3C without grouped-query attention, xy),
// attn.proj (C -> C, yx), mlp.fc (C -> F, or 2F under SwiGLU, xy), mlp.proj (F -> C, yx),
// each `layers` times (the MLPs: once per dense block, MoeShape has the experts'); then
// lm_head (C -> V, xy: wte, or its own weight when untied).
// The cost model iterates these, so pricing a layout allocates nothing per layer.
// The all-reduces over x of one normalization's forward, each of [m] floats: LayerNorm's
// row sums and centered squares, RMSNorm's squares; its backward's one all-reduce is of this
// many floats per row (trainer/model/dist_ops.hpp).
inline int64_t norm_forward_stages(const ModelShape& model) { return model.norm == Norm::layernorm ? 2 : 1; }

struct LinearShape {
  int64_t k = 0, n = 0;
  Axis k_axis = Axis::x;
  int64_t count = 0;
  Axis n_axis() const { return k_axis == Axis::x ? Axis::y : Axis::x; }
};
std::array<LinearShape, 5> linear_shapes(const ModelShape& model);

// How one (data, z) coordinate's share of the global batch is processed.
struct BatchSplit {
  int sequences_per_rank = 0;  // b = global_batch / (G_data * G_z)
  int micro_batch = 0;         // mb: largest divisor of b that is <= the configured micro_batch
  int accumulation = 0;        // A = b / mb micro-batches per step
  int64_t tokens = 0;          // m = mb * T tokens per micro-batch
};
// Throws LayoutError naming the batch and the axes when global_batch % (G_data*G_z) != 0.
BatchSplit batch_split(const ModelShape& model, const BatchShape& batch, const Layout& layout);

// The MoE blocks' work per micro-batch on one rank (docs/moe.md). The routed tokens leave
// this rank in one send buffer of `rows` rows, expert by expert: dropless, every routed token
// (m·k rows, however the router splits them); with a capacity, E segments of
// mb·capacity_per_sequence rows each, zero where a segment is not full. Each expert is a GPT-2
// MLP sharded as mlp.fc and mlp.proj are.
//
// Expert parallelism P = E_p (Layout::experts): a rank holds E_l = E/P experts, the ones of
// its expert rank, and its send buffer goes all-to-all over the expert axis; its experts then
// run on the rows every rank of its expert group routed to them, R_r rows. With a capacity
// R_r = P·E_l·mb·cap = `rows` exactly (each sender's padding travels with its segments);
// dropless R_r depends on the routing, and its mean over the expert group is `rows`, which is
// what the volume and FLOPs predict. The expert-side buffers are allocated for the most R_r
// can be, `expert_rows`: P·m·k dropless (every peer's every row to this rank's experts), the
// capacity's `rows` otherwise; at P = 1 there is no exchange and expert_rows = rows.
//
// The G_y ranks of a y group hold the same tokens (the same rows). With P > 1 and G_y > 1,
// under the hierarchical exchange (Layout::exchange, the default) they do not send them
// twice (DeepSpeed-TED's order, MoNTA's inter-node all-to-all plus intra-node all-gather when
// the y group is inside a node and the expert group spans nodes): y rank j sends the j-th of G_y shares
// of each peer's block, [⌊j·n/G_y⌋, ⌊(j+1)·n/G_y⌋) of its n rows, and the y group then
// all-gathers what it received (an all-to-all over y in which each rank sends its share to
// every y peer); the outputs return the same way. `y_shares` is G_y then (when G_y divides
// `rows`, so the shares' mean is whole), else 1 (and under the flat exchange, where every y
// rank sends all of its rows). A rank's share depends on its y coordinate
// unless G_y divides every block: dropless (the blocks follow the routing), or a capacity
// whose per-peer block of E_l·mb·cap rows G_y does not divide; those bytes are exact summed
// over the y group.
//
// All-gather dispatch. With P > 1 the expert group may instead all-gather its tokens (and
// their routing) so that each rank runs its experts on every routed row of the group, then
// sum the outputs back to their tokens' ranks with a reduce-scatter (backward: the outputs'
// gradients all-gathered, the gates' and the inputs' gradients reduce-scattered). That moves
// P·m token rows over the expert axis per direction against the all-to-all's R/S rows (S =
// y_shares), so `gathers` is true when P·m < R/S: fewer bytes on the expert axis, none on y
// (the gather is not split over y, so y_shares is 1 then), no counts exchange, and bytes that
// do not depend on the routing. Dropless (R = m·k, S = 1) that is P < k; at P = k the
// all-to-all is kept (equal rows). The experts' side is the all-to-all's: R_r rows in the same
// order, so the experts compute the same rows.
//
// Pipelined rounds (model.moe_chunks). The all-to-all may run in `rounds` rounds, round i
// carrying the rows of the local experts [i·E_l/n, (i+1)·E_l/n) to and from every peer, so
// that round i's expert GEMMs run while round i+1's rows move and round i's outputs go back
// while round i+1 computes. Each round's GEMMs are the unpipelined ones (the same rows, the
// same calls), so the bits are too. That needs experts whose GEMMs are whole on this rank
// (G_x = G_y = 1): with an x or y split each GEMM's output is all-reduced, and summing it a
// round at a time would change the ring's summation order. So rounds = min(moe_chunks, E_l)
// with P > 1, the all-to-all (not the all-gather dispatch) and G_x = G_y = 1; 1 otherwise.
// The same bytes move in `rounds` times the calls (expert_exchange.hpp, plan_rounds).
// max_rounds is E_l where rounds apply, else 1; with moe_chunks "auto" rounds is 0 (undecided)
// where max_rounds > 1, and decided_rounds refuses it: resolved_moe_chunks decides first.
struct MoeShape {
  int64_t layers = 0;                 // MoE blocks
  int64_t experts = 0;                // E
  int64_t top_k = 0;                  // k
  int64_t capacity_per_sequence = 0;  // ceil(capacity_factor·T·k / E) token slots per expert; 0: dropless
  int64_t rows = 0;                   // the send buffer's rows per micro-batch (and R_r's mean)
  int64_t expert_ranks = 1;           // P = E_p
  int64_t local_experts = 0;          // E_l = E / P: the experts this rank holds
  int64_t expert_rows = 0;            // the most rows this rank's experts can receive, R_max
  int64_t peer_rows = 0;              // with a capacity, the rows of one block to or from a peer, E_l·mb·cap
  int64_t y_shares = 1;               // G_y when the y group splits the exchange (above), else 1
  bool gathers = false;               // all-gather dispatch (above) instead of the all-to-all
  int64_t max_rounds = 1;             // the most rounds this layout can pipeline in (above)
  int64_t rounds = 1;                 // pipelined rounds of the all-to-all (above); 0: "auto", undecided
  bool dropless() const { return capacity_per_sequence == 0; }
  // Whether R_r, and with it the bytes of the collectives sized by it, depends on the routing:
  // dropless with P > 1.
  bool rows_vary() const { return layers > 0 && dropless() && expert_ranks > 1; }
  // Whether a rank's share of the exchange depends on its y coordinate or the routing.
  bool shares_vary() const { return y_shares > 1 && (dropless() || peer_rows % y_shares != 0); }
};
// At the layout's E_p. Throws LayoutError (expert_problem's message) when E_p does not divide
// the model's experts.
MoeShape moe_shape(const ModelShape& model, const BatchSplit& split, const Layout& layout);
// Without expert parallelism (P = 1): every rank holds every expert.
MoeShape moe_shape(const ModelShape& model, const BatchSplit& split);
// shape.rounds, or LayoutError where model.moe_chunks = "auto" was not decided for the layout.
int64_t decided_rounds(const MoeShape& shape);
// The routing statistics an MoE block sums over the job per micro-batch (float32): each
// expert's routed tokens and router probability sum, and the tokens dropped: 2E + 1.
inline int64_t moe_statistics(const ModelShape& model) { return 2 * int64_t{model.experts} + 1; }
// Slots per expert per sequence: the same token set at every layout, so the same tokens are
// dropped at every layout. 0 for a dropless model.
int64_t expert_capacity_per_sequence(const ModelShape& model);

// Blocks whose forward the backward reruns per micro-batch under `mode` (layout_inputs.hpp):
// every block but the last, whose activations are still in place; 0 for none.
inline int64_t recomputed_blocks(const ModelShape& model, Recompute mode) {
  return mode == Recompute::none || model.layers < 1 ? 0 : model.layers - 1;
}

// Blocks whose z-gathered weights (G_z > 1) are held at once: every block's, kept from the
// forward to the backward, except with block recomputation, which gathers each block's again
// before rerunning it and so holds one block's (two with overlap_comm: the next one's gathers
// run beside the current block). Blocks l and l + 2 then share buffers (l mod the count).
inline int64_t gathered_weight_blocks(const ModelShape& model, Recompute mode, bool overlap_comm) {
  if (mode != Recompute::block) return model.layers;
  return std::min<int64_t>(model.layers, overlap_comm ? 2 : 1);
}

// Elements this rank holds (one shard of every parameter tensor). An MoE block's expert
// tensors ([E, ...]) are split over the expert ranks on dimension 0 as well: E_l experts' each.
struct ParameterCount {
  int64_t big = 0;    // linear weights incl. wte: sum of k*n / (G_x*G_y*G_z)
  int64_t small = 0;  // LayerNorm gamma/beta, biases, wpe: split over one tensor axis only
  int64_t total() const { return big + small; }
};
ParameterCount parameters_per_rank(const ModelShape& model, const Layout& layout);
int64_t parameters_total(const ModelShape& model);  // the whole model, for reports

// The gradient buckets of one rank's data-parallel synchronization (trainer/optim/
// gradient_sync.hpp), in elements, in the trainer's names:
//   "h.<l>"          a dense block's four weight shards (`block`), or an MoE block's attention
//                    weights, qkv and attn.proj (`moe_attention`);
//   "h.<l>.experts"  an MoE block's E_l local experts' fc and proj (`moe_experts`);
//   "wte"            the wte shard, and lm_head's when the embeddings are untied;
//   "small"          every small tensor but the experts' biases: LayerNorms, dense biases,
//                    routers, wpe, ln_f;
//   "small.experts"  every MoE block's local experts' biases (only in an MoE model).
// Together they are every parameter of the rank once. The experts' buckets are summed over
// expert_reduce_axis (the ranks that hold the same experts), the others over data.
struct GradientBuckets {
  int64_t block = 0;          // a dense block's
  int64_t moe_attention = 0;  // an MoE block's "h.l": qkv and attn.proj, (qkv width + C)·C/(G_x G_y G_z)
  int64_t moe_experts = 0;    // an MoE block's "h.l.experts": E_l·(fc width + F)·C/(G_x G_y G_z)
  int64_t wte = 0;
  int64_t small = 0;
  int64_t small_experts = 0;  // MoE blocks × E_l·(fc width/G_y + C/G_x) with biases; else 0
  int64_t layers = 0;         // blocks, dense and MoE
  int64_t moe_layers = 0;     // of which MoE
  int64_t dense_layers() const { return layers - moe_layers; }
  // Block l's "h.l" bucket (ModelShape::is_moe_block).
  int64_t of_block(const ModelShape& model, int l) const { return model.is_moe_block(l) ? moe_attention : block; }
};
GradientBuckets gradient_buckets(const ModelShape& model, const Layout& layout);

// The axis the experts' gradient buckets are all-reduced over: with expert parallelism the
// ranks holding the same experts (CommAxis::expert_data, G_data/E_p of them), else data.
inline CommAxis expert_reduce_axis(const Layout& layout) {
  return layout.experts > 1 ? CommAxis::expert_data : CommAxis::data;
}

// With the optimizer sharded over data (MemoryModes::shard_optimizer, G_data > 1), a bucket
// of `count` elements is stored padded with zeros to G_data equal pieces of
// shard_piece(count, G_data), so that one reduce-scatter splits it; data rank d owns piece d
// (its AdamW state, and its float32 master weights in a bfloat16 job). The padding is at
// most G_data - 1 elements per bucket, and moves with the bucket's collectives.
inline int64_t shard_piece(int64_t count, int data) { return (count + data - 1) / data; }
inline int64_t padded_bucket(int64_t count, int data) { return shard_piece(count, data) * data; }
// Whether the optimizer state is sharded at all: asked for, G_data > 1, and no expert
// parallelism. With E_p > 1 the experts' buckets are reduced over expert_data, not data, so
// their pieces would have to be cut over expert_data while the other buckets' are over data;
// the trainer does not do that, so E_p > 1 trains unsharded (sharding_problem in
// layout_memory.hpp names the conflict when a job forces sharding).
inline bool shards_optimizer(const Layout& layout, bool requested) {
  return requested && layout.data > 1 && layout.experts == 1;
}

// One rank's parameter elements under optimizer sharding (with `shard` false or G_data = 1,
// stored = owned = parameters_per_rank's total).
struct ShardedCount {
  int64_t stored = 0;      // parameters, gradients: every bucket, padded
  int64_t owned = 0;       // AdamW moments: this rank's piece of every bucket
  int64_t owned_big = 0;   // of which the pieces of the weight buckets (blocks and wte)
  int64_t stored_big = 0;  // of `stored`, the weight buckets (the GEMMs' copy of the weights)
};
ShardedCount sharded_count(const ModelShape& model, const Layout& layout, bool shard);

// Whether the layout's expert parallelism E_p (its "eN") suits the model: E_p = 1 always does;
// E_p > 1 needs a mixture-of-experts model whose experts it divides, E / E_p per expert rank.
// (That E_p divides G_data is the layout's own rule, parse_layout's.)
inline bool expert_parallelism_fits(const ModelShape& model, const Layout& layout) {
  return layout.experts == 1 || (model.moe() && model.experts % layout.experts == 0);
}
// Why it does not, naming E_p, E and the fix ("e4 asks for expert parallelism 4 but the model
// is dense ..."); empty when it fits.
std::string expert_problem(const ModelShape& model, const Layout& layout);

// training.tp_chunks as the step runs it; throws LayoutError while it is "auto" (undecided:
// resolved_tp_chunks decides it per layout).
int64_t decided_tp_chunks(const BatchShape& batch);

// Why training.tp_chunks cannot split the micro-batch's rows at `layout` (its micro-batch,
// batch_split's, times the sequence), naming the key, the value, the rows and the counts that
// would; empty when it can, or for "auto".
std::string tp_chunks_problem(const ModelShape& model, const BatchShape& batch, const Layout& layout);

// The first model dimension that `layout` does not divide, as "hidden=64 is not divisible
// by G_x*G_z=3", then its expert_problem, then its tp_chunks_problem; empty when everything
// divides.
std::string divisibility_problem(const ModelShape& model, const BatchShape& batch, const Layout& layout);

// The same test without building a message, for the chooser's loops over many layouts:
// which check fails first (its position in divisibility_problem's list, 0 .. kDivisibilityChecks-1,
// or -1 when every dimension divides) and the product of axis sizes it failed on (E_p for the
// experts' check, training.tp_chunks for the last).
inline constexpr int kExpertCheck = 6;
inline constexpr int kTpChunksCheck = 7;
inline constexpr int kDivisibilityChecks = 8;
struct Indivisible {
  int check = -1;
  int64_t ways = 0;
};
Indivisible first_indivisible(const ModelShape& model, const BatchShape& batch, const Layout& layout);

}  // namespace axonn
