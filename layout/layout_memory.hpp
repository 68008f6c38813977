#pragma once
// Bytes one rank needs for a layout (docs/parallel-plan.md, "Memory per rank"), per
// activation recomputation mode and optimizer sharding (layout_inputs.hpp, MemoryModes).
#include <cstdint>
#include <string>

#include "layout/layout.hpp"

namespace axonn {

struct MemoryEstimate {
  Recompute recompute = Recompute::none;  // the mode the activations and gathered weights are for
  bool shard_optimizer = false;           // the optimizer state is sharded over data (and G_data > 1)
  int64_t parameters = 0;                 // P_rank * e (padded to G_data pieces per bucket when sharded)
  int64_t optimizer = 0;                  // gradients, Adam m and v, float32 master copy when e = 2; sharded,
                                          // m, v and the master copy of this rank's pieces only
  int64_t gathered_weights = 0;           // z-gathered W kept for backward (G_z > 1): every linear's, or with
                                          // block recomputation the head's and one or two blocks' at a time
  int64_t gathered_grad = 0;     // two layers' full dW blocks before their reduce-scatters (G_z > 1)
  int64_t activations = 0;       // saved for backward, one micro-batch
  int64_t workspace = 0;         // backward's activation-gradient buffers, one micro-batch
  // Host memory, not in total(): what the memory copies (checkpoint.memory_interval) hold per
  // rank, in shares S = 12 P / world (parameters and AdamW moments, float32, each rectangle
  // kept by one rank): the copy's staging buffers (1 S), and in the node's tmpfs this rank's
  // shard of the newest two steps and its buddy's (4 S, the same on every node when nodes
  // have equal rank counts).
  int64_t memory_copies = 0;
  int64_t total() const { return parameters + optimizer + gathered_weights + gathered_grad + activations + workspace; }
};

// At `modes` (a recompute mode alone: unsharded). shard_optimizer counts only with G_data > 1.
MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& layout, MemoryModes modes);
// At the modes this job runs at this layout (resolved_modes).
MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& layout);

// Usable bytes per GPU: memory_bytes * (1 - memory_headroom).
double usable_memory(const Machine& machine);

// Why the job's memory modes cannot run at `layout`, naming both settings and the fix; empty
// when they can. training.shard_optimizer = true with expert parallelism E_p > 1: the experts'
// gradient buckets are reduced over expert_data, and the sharded optimizer cuts buckets over
// data only (shards_optimizer, model_plan.hpp).
std::string sharding_problem(const ChooserInput& input, const Layout& layout);

// The modes `layout` runs with (throws LayoutError with sharding_problem's message when
// there is one). What the job names, it gets; for what it leaves "auto" the
// first that fits of: recompute none unsharded, none sharded, attention unsharded, attention
// sharded, block unsharded, block sharded (sharding costs no time in the model, recomputation
// does; sharding is tried only with G_data > 1). When none fits, the least memory: block,
// sharded where it can be (the layout is then rejected for memory).
MemoryModes resolved_modes(const ChooserInput& input, const Layout& layout);
Recompute resolved_recompute(const ChooserInput& input, const Layout& layout);  // resolved_modes(...).recompute

// Why resolved_modes picked its recompute mode, one line for `axonn layout --explain` and the
// trainer's log: "auto: none fits: 12.300 GiB of 72.000 GiB usable", "auto: none needs
// 90.100 GiB, attention needs 80.200 GiB, more than usable; block fits: 40.500 GiB of 72.000 GiB
// usable", "training.recompute = block". When the optimizer sharding is "auto" too (and
// G_data > 1), each tried mode's sharded need follows its unsharded one ("none needs 90.100 GiB,
// 70.200 GiB sharded"), and the mode that fits says whether sharded ("none fits sharded: ...").
std::string recompute_reason(const ChooserInput& input, const Layout& layout);

// Why resolved_modes picked its optimizer sharding, one line: "training.shard_optimizer =
// true", "G_data = 1: nothing to shard", "auto: off: unsharded fits at recompute none (12.300 GiB
// of 72.000 GiB usable)...", "auto: on: at recompute none unsharded needs 90.100 GiB, more than
// the 72.000 GiB usable; sharded 60.200 GiB fits", "auto: off: expert parallelism e2 reduces the
// experts' gradients over expert_data, ...".
std::string shard_reason(const ChooserInput& input, const Layout& layout);

// The formula above with this job's numbers at `layout`'s modes, for `axonn layout --explain`.
std::string memory_formula(const ChooserInput& input, const Layout& layout);

}  // namespace axonn
