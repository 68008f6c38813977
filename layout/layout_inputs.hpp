#pragma once
// The chooser's inputs: plain structs with explicit defaults, no I/O.
// `config/` fills them from the site and job TOML files; the layout library
// only reads them. Units are in the field names (bytes, seconds, FLOP/s).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layout/collective.hpp"
#include "layout/element_type.hpp"
#include "layout/measured_sweep.hpp"
#include "layout/overlap_curve.hpp"

namespace axonn {

// The architecture's choices (model.norm, model.mlp, model.positions): GPT-2's first.
enum class Norm { layernorm = 0, rmsnorm = 1 };
enum class Mlp { gelu = 0, swiglu = 1 };
enum class Positions { learned = 0, rope = 1 };
constexpr const char* norm_name(Norm n) { return n == Norm::rmsnorm ? "rmsnorm" : "layernorm"; }
constexpr const char* mlp_name(Mlp m) { return m == Mlp::swiglu ? "swiglu" : "gelu"; }
constexpr const char* positions_name(Positions p) { return p == Positions::rope ? "rope" : "learned"; }

// Llama 3.1's rotary frequency scaling (model.rope_scaling = "llama3"): wavelengths longer than
// original_positions / low_freq_factor are stretched by `factor`, those shorter than
// original_positions / high_freq_factor kept, the band between blended (docs/llama.md).
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_positions = 8192;
  bool operator==(const RopeScaling&) const = default;
};

// The transformer's shape: GPT-2 by default (LayerNorm, 4x GELU MLP, learned positions,
// biases, tied embeddings); the Llama family with rmsnorm, swiglu, rope, kv_heads < heads, no
// biases and untied embeddings (docs/llama.md). vocab is the padded vocabulary the model uses.
struct ModelShape {
  int layers = 2;
  int hidden = 64;    // C
  int heads = 4;      // H, head size d = C/H
  int vocab = 256;    // V
  int sequence = 64;  // T, also the number of learned position embeddings
  Norm norm = Norm::layernorm;
  double norm_eps = 1e-5;  // GPT-2's and Llama 3's
  Mlp mlp = Mlp::gelu;
  int mlp_hidden = 0;  // F, the MLP's hidden width; 0: 4·C
  Positions positions = Positions::learned;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling = std::nullopt;  // none
  // KV, grouped-query attention's key/value heads (a divisor of H; 1: multi-query); 0: H.
  int kv_heads = 0;
  bool bias = true;            // the linear layers' biases and LayerNorm's beta
  bool tie_embeddings = true;  // the LM head reads wte; false: its own lm_head [V, C]

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t ffn() const { return mlp_hidden > 0 ? mlp_hidden : int64_t{4} * hidden; }
  // Columns of the attention's input projection: H query heads and KV key and value heads.
  int64_t qkv_width() const { return (heads + 2 * kv()) * head_dim(); }
  // Columns of the MLP's first layer: F, or gate and up (2F) under SwiGLU.
  int64_t fc_width() const { return mlp == Mlp::swiglu ? 2 * ffn() : ffn(); }
  // Whether qkv is laid out in key/value groups ([C, KV, H/KV + 2, d], docs/parallel-plan.md)
  // rather than GPT-2's [C, 3, C].
  bool grouped_attention() const { return kv() < heads; }
  // Mixture of experts (docs/moe.md). experts = E, 0: every block's MLP is dense. Else the
  // MLP of every moe_every-th block (blocks moe_every-1, 2·moe_every-1, ...) is E expert
  // MLPs behind a float32 router [C, E] that sends each token to its top_k (1 or 2) experts.
  int experts = 0;
  int top_k = 2;
  int moe_every = 1;
  // Expert capacity = ceil(capacity_factor · tokens · top_k / E) token slots per expert,
  // tokens counted over a set that no layout changes; 0: dropless (every routed token is kept).
  double capacity_factor = 0.0;
  double aux_loss_weight = 0.01;  // the Switch/GShard balance loss E·Σ f_i·P_i, scaled
  // Rounds the expert all-to-all is pipelined in (MoeShape::rounds, docs/moe.md "Pipelined
  // rounds"): round i's expert GEMMs run while round i+1's rows move. 1: one exchange;
  // kAutoMoeChunks ("auto"): per layout the count the layout model predicts fastest
  // (resolved_moe_chunks, layout_search.hpp), decided before anything runs or is priced.
  static constexpr int kAutoMoeChunks = 0;
  int moe_chunks = 1;
  bool moe_chunks_auto() const { return moe_chunks == kAutoMoeChunks; }

  bool moe() const { return experts > 0; }
  bool is_moe_block(int layer) const { return moe() && (layer + 1) % moe_every == 0; }
  int moe_layers() const { return moe_blocks_before(layers); }
  // MoE blocks among blocks 0 .. count-1.
  int moe_blocks_before(int count) const { return moe() ? count / moe_every : 0; }
};

// The batch in sequences. Every (data, z) coordinate processes
// global_batch / (G_data * G_z) sequences per step, in micro-batches of at most
// micro_batch sequences (the largest divisor of its share that is <= micro_batch).
struct BatchShape {
  int global_batch = 8;  // sequences per optimizer step
  int micro_batch = 1;   // sequences per forward/backward on one rank, upper bound
  ElementType dtype = ElementType::float32;
  // training.tp_chunks: each micro-batch's rows (mb·T tokens) in this many equal chunks for the
  // linear layers' tensor-parallel all-reduces, chunk i's beside chunk i+1's GEMM
  // (docs/parallel-plan.md, "Chunks"). kAutoTpChunks ("auto"): per layout the count the layout
  // model predicts fastest (resolved_tp_chunks, layout_search.hpp), decided before anything
  // runs or is priced.
  static constexpr int kAutoTpChunks = 0;
  static constexpr int kMaxTpChunks = 64;
  int tp_chunks = 1;
  bool tp_chunks_auto() const { return tp_chunks == kAutoTpChunks; }
};

// Activation recomputation (training.recompute; docs/parallel-plan.md, "Activation
// recomputation"): what each transformer block's forward keeps for its backward.
//   none:      every activation the backward reads;
//   attention: all but the attention's intermediates (q, k, v, its log-sum-exp and output),
//              which the backward recomputes from the kept ln1 output: the qkv GEMM (with
//              its x all-reduce) and the attention forward, with the qkv weight it kept;
//   block:     only the block's input; the backward reruns the block's forward up to the MLP's
//              GELU (reissuing the block's z all-gathers) before the block's own backward, and
//              every block shares one set of buffers for the rest.
// The last block's activations are still in place when the backward starts, so it is never
// recomputed: L - 1 blocks are, per micro-batch.
enum class Recompute { none = 0, attention = 1, block = 2 };
// Least recomputation first: the order "auto" tries them in.
inline constexpr std::array<Recompute, 3> kRecomputeModes = {Recompute::none, Recompute::attention, Recompute::block};

// "none", "attention", "block".
constexpr const char* recompute_name(Recompute mode) {
  return mode == Recompute::none ? "none" : mode == Recompute::attention ? "attention" : "block";
}

// The memory-saving choices one layout runs with: activation recomputation, and optimizer
// state sharded over the data axis (training.shard_optimizer, ZeRO stage 1): each of the
// G_data ranks that hold a replica of a parameter shard keeps the AdamW moments (and, in a
// bfloat16 job, the float32 master weights) of 1/G_data of it; the data all-reduce of the
// gradients becomes a reduce-scatter, and the updated weights are all-gathered. With
// G_data = 1 there is nothing to shard: shard_optimizer then means the same as false.
struct MemoryModes {
  Recompute recompute = Recompute::none;
  bool shard_optimizer = false;
  MemoryModes() = default;
  // Implicit: a recompute mode alone is that mode, unsharded.
  MemoryModes(Recompute mode, bool shard = false) : recompute(mode), shard_optimizer(shard) {}  // NOLINT
  bool operator==(const MemoryModes&) const = default;
};

// One network tier: alpha-beta model of a point-to-point link.
struct Link {
  double bandwidth_bytes_per_s = 0;  // per GPU, one direction
  double latency_s = 0;              // per message
};

// Per collective kind (CollectiveKind as index), the alpha-beta `axonn calibrate` fitted on
// one tier: time = ring_steps * latency_s + bus_factor * size / bandwidth_bytes_per_s
// (collective.hpp). A kind left unset is priced by the tier's Link.
using KindLinks = std::array<std::optional<Link>, kCollectiveKindCount>;

// A second alpha-beta for a kind's messages of up to max_bytes (nccl-tests size), where the
// implementation takes another path for them and one line does not describe both: Gloo's
// all-reduce exchanges messages up to 64 KiB in one step and runs a ring in 16 KiB pieces
// above that (comm/gloo_sync.hpp).
struct SmallMessageLink {
  int64_t max_bytes = 0;
  Link link;
};
using SmallMessageLinks = std::array<std::optional<SmallMessageLink>, kCollectiveKindCount>;

// Per collective kind, the sweep calibrate fitted those lines to (measured_sweep.hpp): a call
// on groups of the sweep's size, within its sizes, is priced by the sweep itself.
using KindSweeps = std::array<std::optional<MeasuredSweep>, kCollectiveKindCount>;

// What `axonn calibrate` measured of a tier on groups of `ranks`, a size other than its main
// probe's (MeasuredTier::kinds): every group of an axis runs its collectives at the same
// time, so where a node's ranks share its cores or links a group's price depends on how many
// ranks it has and how many groups run beside it, which one alpha-beta per ring step does
// not carry from one size to another (on 4 CPU ranks of 2 cores, groups of 2 paid twice the
// latency the fit over one group of 4 gave them).
struct MeasuredGroup {
  int ranks = 0;
  KindLinks kinds;
  SmallMessageLinks small;
  KindSweeps sweeps;
  double filled_by_others = 0;  // as MeasuredTier's, on groups of `ranks`
  double cores_busy = 0;        // as MeasuredTier's, on groups of `ranks`
  // As MeasuredTier's, on groups of `ranks`; empty: the tier's. Where ranks share cores a
  // group's size changes what overlap costs: 4 CPU ranks on 2 cores hid 29% of a 192 KiB
  // all-reduce of all 4 beside GEMMs, while the tiny job's z calls in pairs ran 15% slower a
  // step started than waited for.
  OverlapCurve overlap;
};

// What `axonn calibrate` measured of one link tier; empty (and overlap 0) where it measured
// nothing, and the tier's Link prices every collective on it.
struct MeasuredTier {
  KindLinks kinds;
  SmallMessageLinks small;
  KindSweeps sweeps;  // on groups of the tier's main probe
  // Other group sizes, each at most once; a collective on groups of a size listed here is
  // priced by that size's fit of its kind, every other by `kinds`.
  std::vector<MeasuredGroup> groups;
  // The fraction of a collective's time that running it beside compute hides, -1 to 1, by
  // its size (overlap_curve.hpp; calibrate's overlap probe: collectives each started beside
  // GEMMs, against the same GEMMs each followed by the collective waited for). Empty: nothing
  // is hidden, every collective's time is added to the step; below 0: started beside compute
  // a collective of that size costs that fraction of its time more than waited for where it
  // is issued (CPU ranks on every core: the communicator's thread takes turns with compute),
  // and "auto" does not overlap where that outweighs what the other sizes hide
  // (comm_overlap.hpp).
  OverlapCurve overlap;
  // Where a node's ranks outnumber its cores and take turns on them (the CPU backend with more
  // ranks than cores), the fraction of a blocking collective's time in which the other ranks
  // compute instead: while a group waits for its slowest member, the cores it leaves run the
  // ranks of other groups, whose compute then ends sooner (calibrate's time-sharing probe, 0
  // to 1). 0 where cores are not shared: each rank has its own, and its wait is the step's.
  double filled_by_others = 0;
  // Where a node's ranks outnumber its cores, the fraction of the node's cores that a
  // collective's ranks keep busy for its time: the CPU they spend in it themselves (copying,
  // summing, the TCP stack of a loopback connection), which no other rank computes through
  // (calibrate's sweeps of every kind: each rank's CPU seconds in a call per second of it,
  // times the host's ranks per core, the median over sizes; 0 to 1). The overlapped and the filled credits together
  // take off at most the rest of the collectives' time. 0 where cores are not shared.
  double cores_busy = 0;
};

// One linear layer's GEMM on one rank, Y (m, n) = X (m, k)·W (k, n): m the micro-batch's
// tokens, k and n the rank's shard of the layer (W gathered over z). Its forward and both
// backward GEMMs (dX = dY·W^T, dW = X^T·dY) are 6·m·k·n FLOPs.
struct GemmShape {
  int64_t m = 0, k = 0, n = 0;
  bool operator==(const GemmShape&) const = default;
};

// A shape's three GEMMs as `axonn calibrate` measured them: 6·m·k·n FLOPs at flops_per_s.
struct GemmRate {
  GemmShape shape;
  double flops_per_s = 0;
};

// What the chooser knows of the machine. Ranks are placed in blocks:
// node = rank / tasks_per_node (Slurm's default block distribution),
// switch = node / nodes_per_switch.
struct Machine {
  int nodes = 1;
  int tasks_per_node = 1;           // usually GPUs per node
  int nodes_per_switch = 0;         // 0: all nodes on one switch (no third tier)
  double peak_flops = 1e12;         // per GPU, for the job's dtype
  double compute_efficiency = 0.5;  // achieved fraction of peak for GEMMs
  double memory_bytes = 16e9;       // per GPU
  double memory_headroom = 0.1;     // fraction of memory_bytes kept free
  Link intra_node;                  // NVLink / NVSwitch / shared memory
  Link inter_node;                  // IB / Slingshot, per GPU, within one switch
  Link inter_switch;                // between switches (used when nodes_per_switch > 0)
  // Measured by `axonn calibrate` (the site's gemm_tflops_<dtype>, compute.gemm and
  // [network.<tier>] keys). Unset, compute runs at peak x efficiency and every collective is
  // priced by its tier's Link, as without them.
  double gemm_flops = 0;               // per GPU, the job's dtype: GEMMs of a shape not in gemm_rates, and attention
  std::vector<GemmRate> gemm_rates;    // per GPU, the job's dtype, by shape
  double attention_flops = 0;          // per GPU, the job's dtype: attention, 0 unmeasured (then gemm_flops)
  double elementwise_bytes_per_s = 0;  // per GPU: the memory-bound ops (memory_bound_bytes.hpp), 0 unmeasured
  MeasuredTier intra_node_measured, inter_node_measured, inter_switch_measured;
  // Bias and GELU inside the GEMMs where no collective sits between them (the CUDA backend's
  // cuBLASLt epilogues), else separate passes over memory (the CPU backend).
  bool gemm_epilogues = true;
  bool calibrated_compute() const { return gemm_flops > 0 || !gemm_rates.empty() || attention_flops > 0; }
};

// Every compute rate of `machine` (peak and measured) times `factor`: a CPU node's ranks
// share its cores and memory bandwidth, so a run with fewer ranks there than the site's GPUs
// per node gets more each.
inline void scale_compute(Machine& machine, double factor) {
  machine.peak_flops *= factor;
  machine.gemm_flops *= factor;
  machine.attention_flops *= factor;
  machine.elementwise_bytes_per_s *= factor;
  for (GemmRate& rate : machine.gemm_rates) rate.flops_per_s *= factor;
}

// Site policy that restricts the search.
struct Policy {
  std::vector<int> allowed_axis_sizes;  // empty: any divisor; else every axis size must be listed
  int max_tensor_parallel = 0;          // 0: no limit; else G_x * G_y * G_z <= this
};

struct ChooserInput {
  ModelShape model;
  BatchShape batch;
  Machine machine;
  Policy policy;
  // training.recompute: a mode, or unset for "auto": per layout the least recomputation
  // that fits in memory (resolved_modes, layout_memory.hpp).
  std::optional<Recompute> recompute;
  // training.shard_optimizer: true, false, or unset for "auto": per layout, sharded when
  // that is what makes the layout fit, or fit with less recomputation (resolved_modes,
  // layout_memory.hpp); otherwise not, since the all-gather after the optimizer step, unlike
  // the all-reduce it halves, is not hidden behind the backward.
  std::optional<bool> shard_optimizer;
  // training.overlap_comm: true, false, or unset for "auto": overlapped unless calibrate
  // measured that it costs on a tier the overlapped axes use (overlaps_comm,
  // comm_overlap.hpp). Overlapped calls are priced by their tier's overlap; with block
  // recomputation the next block's z all-gathers run beside the current block, so two
  // blocks' gathered weights are held instead of one.
  std::optional<bool> overlap_comm;
  // With memory copies (checkpoint.memory_interval a count or "auto"): each rank keeps copies
  // of the state in host memory (MemoryEstimate::memory_copies); the GPU's memory is not used
  // for them.
  bool memory_copies = false;
  int world() const { return machine.nodes * machine.tasks_per_node; }
};

}  // namespace axonn
