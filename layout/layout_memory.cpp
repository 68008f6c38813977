#include "layout/layout_memory.hpp"

#include <algorithm>
#include <cstdio>

#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// Saved activations of one micro-batch, in elements (what trainer/model/gpt.cpp keeps).
int64_t activation_elements(const ModelShape& model, const Layout& g, int64_t m, int64_t mb) {
  const int64_t C = model.hidden, T = model.sequence;
  // Block input, ln1 out, input + attention (ln2 in), ln2 out: 4 m C/G_x; q, k, v and the
  // attention output: 4 m C/G_y; attention's row log-sum-exp mb (H/G_y) T = m H/G_y (the
  // flash-style kernels keep no T×T probabilities: backward recomputes them); mlp.fc out and
  // GELU out: 2 m 4C/G_y.
  const int64_t per_block = 4 * m * C / g.x + 4 * m * C / g.y + mb * (model.heads / g.y) * T + 8 * m * C / g.y;
  // ln_f in and out; the logits, which become their softmax and then their gradient in place.
  const int64_t head = 2 * m * C / g.x + m * model.vocab / g.y;
  return model.layers * per_block + head;
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

MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& g) {
  const int64_t e = element_size(input.batch.dtype);
  const ParameterCount p = parameters_per_rank(input.model, g);
  const BatchSplit split = batch_split(input.model, input.batch, g);
  MemoryEstimate mem;
  mem.parameters = p.total() * e;
  // gradient (float32), Adam m and v (float32), master weights (float32) when e = 2.
  mem.optimizer = p.total() * (4 + 4 + 4 + (e == 2 ? 4 : 0));
  if (g.z > 1) {
    // Two dW blocks take turns (trainer/model/grad_scatter.hpp): one the largest of any
    // layer, one the largest of the block layers (the head's is the last).
    const auto shapes = linear_shapes(input.model);
    int64_t largest = 0, largest_in_blocks = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const LinearShape& lin = shapes[i];
      const int64_t block = lin.k / g.size(lin.k_axis) * (lin.n / g.size(lin.n_axis()));
      mem.gathered_weights += lin.count * block * e;
      largest = std::max(largest, block);
      if (i + 1 < shapes.size()) largest_in_blocks = std::max(largest_in_blocks, block);
    }
    mem.gathered_grad = (largest + largest_in_blocks) * 4;  // gradients are float32
  }
  mem.activations = activation_elements(input.model, g, split.tokens, split.micro_batch) * e;
  mem.workspace = workspace_elements(input.model, g, split.tokens) * e;
  return mem;
}

double usable_memory(const Machine& machine) { return machine.memory_bytes * (1.0 - machine.memory_headroom); }

std::string memory_formula(const ChooserInput& input, const Layout& g) {
  const MemoryEstimate mem = estimate_memory(input, g);
  const ParameterCount p = parameters_per_rank(input.model, g);
  const BatchSplit split = batch_split(input.model, input.batch, g);
  const int e = static_cast<int>(element_size(input.batch.dtype));
  std::string s;
  s += "memory per GPU for layout " + format_layout(g) + " (e = " + std::to_string(e) + " bytes, " +
       element_type_name(input.batch.dtype) + "):\n";
  s += "  parameters        P_rank*e = (" + std::to_string(p.big) + " sharded + " + std::to_string(p.small) +
       " small) * " + std::to_string(e) + " = " + gib(static_cast<double>(mem.parameters)) + "\n";
  s += "  optimizer         P_rank*(4 grad + 4 adam_m + 4 adam_v" + std::string(e == 2 ? " + 4 master" : "") +
       ") = " + gib(static_cast<double>(mem.optimizer)) + "\n";
  s += "  gathered weights  sum over linears of k/G_a*n/G_b*e (only when G_z > 1) = " +
       gib(static_cast<double>(mem.gathered_weights)) + "\n";
  s +=
      "  gathered gradient (largest k/G_a*n/G_b + largest of a block's layers)*4 (only when G_z > 1) = " + gib(static_cast<double>(mem.gathered_grad)) +
      "\n";
  s += "  activations       L*(4mC/G_x + 12mC/G_y + mH/G_y) + 2mC/G_x + mV/G_y, m = mb*T = " +
       std::to_string(split.tokens) + " = " + gib(static_cast<double>(mem.activations)) + "\n";
  s += "  workspace         2mC/G_x + 8mC/G_y (backward's gradient buffers) = " +
       gib(static_cast<double>(mem.workspace)) + "\n";
  s += "  total " + gib(static_cast<double>(mem.total())) + " of " + gib(usable_memory(input.machine)) +
       " usable (memory " + gib(input.machine.memory_bytes) + " less headroom)\n";
  return s;
}

}  // namespace axonn
