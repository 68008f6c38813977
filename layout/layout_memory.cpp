#include "layout/layout_memory.hpp"

#include <algorithm>
#include <cstdio>

#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// Saved activations of one micro-batch, in elements (what trainer/model/gpt.cpp keeps), by
// what each recomputation mode keeps of them.
struct ActivationParts {
  int64_t input = 0;      // per block: its input, the residual stream, m C/G_x
  int64_t attention = 0;  // per block: q, k, v and the attention output, 4 m C/G_y, and the
                          // attention's row log-sum-exp mb (H/G_y) T = m H/G_y (the flash-style
                          // kernels keep no T×T probabilities: backward recomputes them)
  int64_t rest = 0;       // per block: ln1 out, input + attention (ln2 in), ln2 out, 3 m C/G_x;
                          // mlp.fc out and GELU out, 2 m 4C/G_y
  int64_t head = 0;       // ln_f in and out; the logits, which become their softmax and then
                          // their gradient in place
};

ActivationParts activation_parts(const ModelShape& model, const Layout& g, int64_t m, int64_t mb) {
  const int64_t C = model.hidden, T = model.sequence;
  ActivationParts p;
  p.input = m * C / g.x;
  p.attention = 4 * m * C / g.y + mb * (model.heads / g.y) * T;
  p.rest = 3 * m * C / g.x + 8 * m * C / g.y;
  p.head = 2 * m * C / g.x + m * model.vocab / g.y;
  return p;
}

// none: every block keeps all three parts. attention: every block keeps its input and the
// rest, one set of attention buffers serves every block. block: every block keeps its input,
// one set of the other two serves every block.
int64_t activation_elements(const ActivationParts& p, int64_t layers, Recompute mode) {
  const int64_t shared_sets = layers > 0 ? 1 : 0;
  switch (mode) {
    case Recompute::none:
      return layers * (p.input + p.attention + p.rest) + p.head;
    case Recompute::attention:
      return layers * (p.input + p.rest) + shared_sets * p.attention + p.head;
    case Recompute::block:
      return layers * p.input + shared_sets * (p.attention + p.rest) + p.head;
  }
  return 0;
}

// Backward's working buffers, reused by every block: the residual stream's gradient and a
// LayerNorm output's, 2 m C/G_x; the MLP hidden's, attention output's and qkv's, 8 m C/G_y.
int64_t workspace_elements(const ModelShape& model, const Layout& g, int64_t m) {
  const int64_t C = model.hidden;
  return 2 * m * C / g.x + 8 * m * C / g.y;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& g, Recompute mode) {
  const int64_t e = element_size(input.batch.dtype);
  const ParameterCount p = parameters_per_rank(input.model, g);
  const BatchSplit split = batch_split(input.model, input.batch, g);
  MemoryEstimate mem;
  mem.recompute = mode;
  mem.parameters = p.total() * e;
  // gradient (float32), Adam m and v (float32), master weights (float32) when e = 2.
  mem.optimizer = p.total() * (4 + 4 + 4 + (e == 2 ? 4 : 0));
  if (g.z > 1) {
    // Two dW blocks take turns (trainer/model/grad_scatter.hpp): one the largest of any
    // layer, one the largest of the block layers (the head's is the last).
    const auto shapes = linear_shapes(input.model);
    int64_t largest = 0, largest_in_blocks = 0, one_block = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const LinearShape& lin = shapes[i];
      const int64_t block = lin.k / g.size(lin.k_axis) * (lin.n / g.size(lin.n_axis()));
      largest = std::max(largest, block);
      if (i + 1 < shapes.size()) {
        largest_in_blocks = std::max(largest_in_blocks, block);
        one_block += block;
      } else {
        mem.gathered_weights += block * e;  // the head's (wte), held the whole micro-batch
      }
    }
    mem.gathered_weights += gathered_weight_blocks(input.model, mode, input.overlap_comm) * one_block * e;
    mem.gathered_grad = (largest + largest_in_blocks) * 4;  // gradients are float32
  }
  const ActivationParts parts = activation_parts(input.model, g, split.tokens, split.micro_batch);
  mem.activations = activation_elements(parts, input.model.layers, mode) * e;
  mem.workspace = workspace_elements(input.model, g, split.tokens) * e;
  return mem;
}

MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& g) {
  return estimate_memory(input, g, resolved_recompute(input, g));
}

double usable_memory(const Machine& machine) { return machine.memory_bytes * (1.0 - machine.memory_headroom); }

Recompute resolved_recompute(const ChooserInput& input, const Layout& g) {
  if (input.recompute) return *input.recompute;
  const double usable = usable_memory(input.machine);
  for (Recompute mode : kRecomputeModes)
    if (static_cast<double>(estimate_memory(input, g, mode).total()) <= usable) return mode;
  return Recompute::block;
}

std::string recompute_reason(const ChooserInput& input, const Layout& g) {
  if (input.recompute) return std::string("training.recompute = ") + recompute_name(*input.recompute);
  const double usable = usable_memory(input.machine);
  std::string tried;  // the modes that do not fit, with what they need
  for (Recompute mode : kRecomputeModes) {
    const double need = static_cast<double>(estimate_memory(input, g, mode).total());
    if (need <= usable)
      return "auto: " + (tried.empty() ? "" : tried + ", more than usable; ") + recompute_name(mode) +
             " fits: " + gib(need) + " of " + gib(usable) + " usable";
    tried += (tried.empty() ? "" : ", ") + std::string(recompute_name(mode)) + " needs " + gib(need);
  }
  return "auto: " + tried + ", each more than the " + gib(usable) + " usable: block, the least";
}

std::string memory_formula(const ChooserInput& input, const Layout& g) {
  const Recompute mode = resolved_recompute(input, g);
  const MemoryEstimate mem = estimate_memory(input, g, mode);
  const ParameterCount p = parameters_per_rank(input.model, g);
  const BatchSplit split = batch_split(input.model, input.batch, g);
  const int e = static_cast<int>(element_size(input.batch.dtype));
  std::string s;
  s += "memory per GPU for layout " + format_layout(g) + " (e = " + std::to_string(e) + " bytes, " +
       element_type_name(input.batch.dtype) + ", recompute " + recompute_name(mode) + "):\n";
  s += "  parameters        P_rank*e = (" + std::to_string(p.big) + " sharded + " + std::to_string(p.small) +
       " small) * " + std::to_string(e) + " = " + gib(static_cast<double>(mem.parameters)) + "\n";
  s += "  optimizer         P_rank*(4 grad + 4 adam_m + 4 adam_v" + std::string(e == 2 ? " + 4 master" : "") +
       ") = " + gib(static_cast<double>(mem.optimizer)) + "\n";
  const int64_t held = gathered_weight_blocks(input.model, mode, input.overlap_comm);
  s += "  gathered weights  (" + std::string(held == input.model.layers ? "L" : std::to_string(held)) +
       " blocks' + the head's) k/G_a*n/G_b*e (only when G_z > 1) = " + gib(static_cast<double>(mem.gathered_weights)) +
       "\n";
  s += "  gathered gradient (largest k/G_a*n/G_b + largest of a block's layers)*4 (only when G_z > 1) = " +
       gib(static_cast<double>(mem.gathered_grad)) + "\n";
  // Per block: input mC/G_x; attention 4mC/G_y + mH/G_y; the rest 3mC/G_x + 8mC/G_y.
  const char* per_block = mode == Recompute::none        ? "L*(4mC/G_x + 12mC/G_y + mH/G_y)"
                          : mode == Recompute::attention ? "L*(4mC/G_x + 8mC/G_y) + (4mC/G_y + mH/G_y)"
                                                         : "L*mC/G_x + (3mC/G_x + 12mC/G_y + mH/G_y)";
  s += "  activations       " + std::string(per_block) +
       " + 2mC/G_x + mV/G_y, m = mb*T = " + std::to_string(split.tokens) + " = " +
       gib(static_cast<double>(mem.activations)) + "\n";
  s += "  workspace         2mC/G_x + 8mC/G_y (backward's gradient buffers) = " +
       gib(static_cast<double>(mem.workspace)) + "\n";
  s += "  total " + gib(static_cast<double>(mem.total())) + " of " + gib(usable_memory(input.machine)) +
       " usable (memory " + gib(input.machine.memory_bytes) + " less headroom)\n";
  s += "  recompute         " + recompute_reason(input, g) + "\n";
  return s;
}

}  // namespace axonn
