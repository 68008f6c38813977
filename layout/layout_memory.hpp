#pragma once
// Bytes one rank needs for a layout (docs/parallel-plan.md, "Memory per rank"), per
// activation recomputation mode (layout_inputs.hpp, Recompute).
#include <cstdint>
#include <string>

#include "layout/layout.hpp"

namespace axonn {

struct MemoryEstimate {
  Recompute recompute = Recompute::none;  // the mode the activations and gathered weights are for
  int64_t parameters = 0;                 // P_rank * e
  int64_t optimizer = 0;                  // gradients, Adam m and v, float32 master copy when e = 2
  int64_t gathered_weights = 0;           // z-gathered W kept for backward (G_z > 1): every linear's, or with
                                          // block recomputation the head's and one or two blocks' at a time
  int64_t gathered_grad = 0;     // two layers' full dW blocks before their reduce-scatters (G_z > 1)
  int64_t activations = 0;       // saved for backward, one micro-batch
  int64_t workspace = 0;         // backward's activation-gradient buffers, one micro-batch
  int64_t total() const { return parameters + optimizer + gathered_weights + gathered_grad + activations + workspace; }
};

// At recomputation `mode`.
MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& layout, Recompute mode);
// At the mode this job runs at this layout (resolved_recompute).
MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& layout);

// Usable bytes per GPU: memory_bytes * (1 - memory_headroom).
double usable_memory(const Machine& machine);

// The recomputation `layout` runs with: input.recompute when the job names a mode; for
// "auto" (unset) the least recomputation (none, then attention, then block) whose memory
// fits, and block, the least memory, when none does (the layout is then rejected for memory).
Recompute resolved_recompute(const ChooserInput& input, const Layout& layout);

// Why resolved_recompute picked its mode, one line for `axonn layout --explain` and the
// trainer's log: "auto: none fits: 12.300 GiB of 72.000 GiB usable", "auto: none needs
// 90.100 GiB, attention needs 80.200 GiB, more than usable; block fits: 40.500 GiB of 72.000 GiB
// usable", "training.recompute = block".
std::string recompute_reason(const ChooserInput& input, const Layout& layout);

// The formula above with this job's numbers at `layout`'s mode, for `axonn layout --explain`.
std::string memory_formula(const ChooserInput& input, const Layout& layout);

}  // namespace axonn
