#pragma once
// Bytes one rank needs for a layout (docs/parallel-plan.md, "Memory per rank").
#include <cstdint>
#include <string>

#include "layout/layout.hpp"

namespace axonn {

struct MemoryEstimate {
  int64_t parameters = 0;        // P_rank * e
  int64_t optimizer = 0;         // gradients, Adam m and v, float32 master copy when e = 2
  int64_t gathered_weights = 0;  // z-gathered W of every linear, kept for backward (G_z > 1)
  int64_t gathered_grad = 0;     // two layers' full dW blocks before their reduce-scatters (G_z > 1)
  int64_t activations = 0;       // saved for backward, one micro-batch
  int64_t workspace = 0;         // backward's activation-gradient buffers, one micro-batch
  int64_t total() const { return parameters + optimizer + gathered_weights + gathered_grad + activations + workspace; }
};

MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& layout);

// Usable bytes per GPU: memory_bytes * (1 - memory_headroom).
double usable_memory(const Machine& machine);

// The formula above with this job's numbers, for `axonn layout --explain`.
std::string memory_formula(const ChooserInput& input, const Layout& layout);

}  // namespace axonn
