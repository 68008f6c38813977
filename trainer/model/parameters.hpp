#pragma once
// The GPT's parameter tensors as global tensors, and which rectangle of each one a rank of
// a 4D layout holds (docs/parallel-plan.md). Pure: no backend, no I/O. The trainer, the
// checkpoint save/load and `axonn ckpt plan` all use this one table, so they cannot disagree.
//
// Every shard is one rectangle (a hyperslab) of its global tensor: each dimension is split
// over zero or more grid axes, the first listed axis outermost. The rows of an "xy" weight
// [k, n] are split over {x, z}: block index x*G_z + z, so the z-shards of one x-block are
// adjacent and a z all-gather of row shards is a plain concatenation.
//
// Tensors (C hidden, H heads of size d, KV key/value heads, F MLP hidden, V vocab, T
// sequence, L layers; role of each linear layer in parentheses, shard shape after the arrow):
//   wte                 [V, C]      rows {y}, cols {x, z}   -> [V/G_y, C/(G_x G_z)]   (lm_head, xy, tied)
//   lm_head.weight      [V, C]      as wte, when model.tie_embeddings = false         (xy)
//   h.l.attn.qkv.weight [C, 3, C]   rows {x, z}, cols {y}   -> [C/(G_x G_z), 3, C/G_y] (xy)
//                       [C, KV, H/KV + 2, d] with grouped-query attention (KV < H): groups {y}
//   h.l.attn.proj.weight[C, C]      rows {y, z}, cols {x}   -> [C/(G_y G_z), C/G_x]   (yx)
//   h.l.mlp.fc.weight   [C, F]      rows {x, z}, cols {y}; SwiGLU's [C, 2, F] (gate | up) (xy)
//   h.l.mlp.proj.weight [F, C]      rows {y, z}, cols {x}                            (yx)
//   wpe                 [T, C]      cols {x}, with learned positions only
//   h.l.ln1.weight, h.l.ln2.weight, ln_f.weight [C] split {x}; LayerNorm's .bias beside each
//   With model.bias (GPT-2's; Llama has none): h.l.attn.qkv.bias (qkv's shape without its
//   rows) {y}; h.l.mlp.fc.bias (fc's without its rows) {y}; h.l.attn.proj.bias,
//   h.l.mlp.proj.bias [C] {x}
// In an MoE block (ModelShape::is_moe_block) the MLP is E experts and a router instead:
//   h.l.mlp.experts.fc.weight   [E, <fc's shape>]  {expert}, then as mlp.fc         (xy per expert)
//   h.l.mlp.experts.proj.weight [E, F, C]  {expert}, rows {y, z}, cols {x}          (yx per expert)
//   h.l.mlp.experts.fc.bias [E, <fc bias's shape>] {expert, y}; h.l.mlp.experts.proj.bias [E, C] {expert, x}
//   h.l.mlp.router.weight   [C, E]      rows {x}  (float32 logits; decayed, beside wpe)
// Expert rank r (Axis::expert, data coordinate mod E_p) holds experts [r·E/E_p, (r+1)·E/E_p),
// local expert e's shard the contiguous [e] slab of its rectangle; the copies of a rank's
// experts are the ranks of its expert_data cut (replica_axes).
// qkv as [C, 3, C] makes a rank's q, k and v columns one rectangle whose row-major storage
// is the packed [rows, q|k|v] layout attention reads; reshaped to [C, 3C] it is GPT-2's c_attn.
// Grouped, a rank's rectangle [C/(G_x G_z), KV/G_y, H/KV + 2, d] is its key/value heads'
// groups, each [its query heads | k | v] (Megatron-LM's fused layout), which attention reads
// with a group stride; SwiGLU's [C, 2, F] gives each rank [gate | up] of the same units.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/rect.hpp"
#include "layout/layout.hpp"

namespace axonn {

enum class ParamGroup {
  sharded,  // linear weights and wte: split over x, y and z, replicated over data (experts' over expert_data)
  small,    // normalization gains, biases, wpe: split over one tensor axis, gradients summed over z
};

enum class ParamInit { normal, zeros, ones };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;            // global
  std::vector<std::vector<Axis>> split;  // per dimension, outermost axis first; empty: whole
  ParamGroup group = ParamGroup::sharded;
  bool decay = false;  // AdamW weight decay (2-D weights and embeddings, as GPT-2)
  ParamInit init = ParamInit::normal;
  float init_std = 0.0f;  // for ParamInit::normal
};

// In flat-buffer order: sharded weights, then small decayed (routers, wpe), then small
// undecayed, then the experts' biases, so that the decayed parameters are one prefix and the
// small ones one suffix of every buffer.
std::vector<ParamSpec> gpt_parameters(const ModelShape& model);

// The rectangle of `spec` that the rank at `coords` holds. Throws LayoutError naming the
// tensor, dimension and axes when the layout does not divide it.
Rect shard_rect(const ParamSpec& spec, const Layout& layout, const Coords& coords);

// Whether some dimension of `spec` is split over `axis`.
bool splits_over(const ParamSpec& spec, Axis axis);

// Axes over which ranks hold identical copies of the shard: the grid axes in no split, with
// expert_data for data when the tensor is split over the expert ranks.
std::vector<Axis> replica_axes(const ParamSpec& spec);

// Whether the sharded optimizer cuts a shard's copies over replica axis `a` (each copy then
// holds another piece of its moments): data, which replica_axes names expert_data for an
// experts' tensor. The optimizer is sharded only without expert parallelism
// (shards_optimizer, layout/model_plan.hpp), where expert_data is the whole data axis.
inline bool optimizer_pieces_over(Axis a) { return a == Axis::data || a == Axis::expert_data; }

// Where each tensor's shard lives in a rank's flat parameter (and gradient, Adam) buffers.
struct ParamSlot {
  ParamSpec spec;
  Rect rect;           // this rank's rectangle of the global tensor
  int64_t offset = 0;  // elements from the start of the flat buffer
  int64_t count = 0;   // element_count(rect)
};

// One bucket of the data-parallel gradient synchronization (gradient_sync.hpp): adjacent
// slots, followed by zeros up to `padded` elements (layout/model_plan.hpp, padded_bucket)
// when the optimizer is sharded over data, so that it splits into `pieces` equal pieces.
struct ParamBucket {
  std::string name;    // "wte", "h.0", "h.0.experts" (MoE), ..., "small", "small.experts" (MoE)
  int64_t offset = 0;  // of its first slot
  int64_t count = 0;   // its slots' elements
  int64_t padded = 0;  // elements it occupies, count plus padding
  int64_t piece(int pieces) const { return padded / pieces; }
};

struct ParameterLayout {
  std::vector<ParamSlot> slots;      // gpt_parameters order
  std::vector<ParamBucket> buckets;  // flat order: wte, h.0 [h.0.experts] ... h.<L-1>, small [small.experts]
  int pieces = 1;                    // G_data when the optimizer is sharded, else 1
  int64_t total = 0;                 // elements per rank, padding included
  int64_t sharded = 0;               // the prefix holding ParamGroup::sharded tensors (the weight buckets)
  int64_t decayed = 0;               // the prefix with weight decay (sharded + wpe)
  const ParamSlot& slot(const std::string& name) const;      // throws std::out_of_range naming it
  bool has(const std::string& name) const;                   // whether the model has that tensor
  const ParamBucket& bucket(const std::string& name) const;  // throws std::out_of_range naming it
  const ParamBucket& small_bucket() const { return bucket("small"); }
  // Whether `b` is an experts' bucket, "h.<l>.experts" or "small.experts", whose gradients
  // are summed over the ranks holding the same experts (gradient_sync.hpp).
  static bool holds_experts(const ParamBucket& b) { return b.name.ends_with(".experts"); }
};

// shard_optimizer: pad every bucket to G_data equal pieces (shards_optimizer(layout, it)).
ParameterLayout parameter_layout(const ModelShape& model, const Layout& layout, const Coords& coords,
                                 bool shard_optimizer = false);

// The elements of the flat buffers that this rank's optimizer state covers: runs of
// [offset, offset + count) of the parameters and gradients, held at [state_offset,
// state_offset + count) of the AdamW moments. Unsharded, one run of every element; sharded,
// data rank d's piece of every bucket (padding included: it stays zero).
struct StateRun {
  int64_t offset = 0;
  int64_t state_offset = 0;
  int64_t count = 0;
};
std::vector<StateRun> optimizer_state_runs(const ParameterLayout& layout, int data_rank);

// The training state as the checkpoint stores it: every parameter at its global name, its
// AdamW moments at "adam.m/<name>" and "adam.v/<name>", each a global float32 tensor of the
// parameter's shape whatever the layout and the sharding. What a rank holds of them, as
// rectangles of those tensors, and where each lies in the rank's buffers.
enum class StateBuffer { params = 0, adam_m = 1, adam_v = 2, master = 3 };
struct StateSlice {
  std::string name;              // "wte", "adam.m/wte", "adam.v/h.0.attn.qkv.weight", ...
  const ParamSlot* slot;         // the parameter (points into the ParameterLayout given)
  Rect rect;                     // of the global tensor: the slot's rectangle, or a part of it
  StateBuffer buffer;            // params (flat offsets), adam_m, adam_v, master (state offsets)
  int64_t offset = 0;            // elements into that buffer, row-major over rect.count from there
  bool split_over_data = false;  // a sharded moment or master piece: each data rank holds another part
};
// Parameters (the whole slot), then adam.m, then adam.v, in slot order; a moment of a sharded
// optimizer is cut where the rank's state runs cut it (flat_range_rects), so each of its
// rectangles is consecutive in the moments' buffer. master_pieces: the weight buckets'
// parameters as the sharded master weights hold them (cut like the moments, from the master
// buffer; ParameterStore::master_sharded), what a save writes; a load reads them whole.
std::vector<StateSlice> state_slices(const ParameterLayout& layout, const std::vector<StateRun>& runs,
                                     bool master_pieces = false);

}  // namespace axonn
