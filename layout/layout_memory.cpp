#include "layout/layout_memory.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "layout/comm_overlap.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// Saved activations of one micro-batch, in elements (what trainer/model/gpt.cpp keeps), by
// what each recomputation mode keeps of them.
struct ActivationParts {
  int64_t input = 0;      // per block: its input, the residual stream, m C/G_x
  int64_t attention = 0;  // per block: q, k, v, m (H + 2KV) d/G_y, the attention output, m C/G_y,
                          // and the attention's row log-sum-exp mb (H/G_y) T = m H/G_y (the
                          // flash-style kernels keep no T×T probabilities: backward recomputes them)
  int64_t rest = 0;       // per block: ln1 out, input + attention (ln2 in), ln2 out, 3 m C/G_x;
                          // mlp.fc out (F or SwiGLU's 2F) and the activation's, m F/G_y
  int64_t head = 0;       // ln_f in and out; the logits, which become their softmax and then
                          // their gradient in place
};

ActivationParts activation_parts(const ModelShape& model, const Layout& g, int64_t m, int64_t mb) {
  const int64_t C = model.hidden, T = model.sequence;
  ActivationParts p;
  p.input = m * C / g.x;
  p.attention = m * (model.qkv_width() + C) / g.y + mb * (model.heads / g.y) * T;
  p.rest = 3 * m * C / g.x + m * (model.fc_width() + model.ffn()) / g.y;
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
// normalization output's, 2 m C/G_x; mlp.fc output's (SwiGLU's also the activation's, F),
// the attention output's, C, and qkv's, (H + 2KV) d, all m ·/G_y.
int64_t workspace_elements(const ModelShape& model, const Layout& g, int64_t m) {
  const int64_t C = model.hidden;
  const int64_t mlp = model.fc_width() + (model.mlp == Mlp::swiglu ? model.ffn() : 0);
  return 2 * m * C / g.x + m * (mlp + C + model.qkv_width()) / g.y;
}

// The MoE blocks' own buffers (trainer/model/moe_layer.hpp), each block's, under every
// recomputation mode (R = MoeShape::rows, c = C/G_x, h = F/G_y, f = fc's width / G_y: h, or
// 2h with SwiGLU; E_l local experts):
//   kept: float32 router logits and probabilities [m, E], gates [m, k], int32 choices and
//   slots [m, k], each row's token and gate [R]; the experts' rows: input [R, c], fc output
//   [R, f], its activation [R, h], output [R, c];
//   backward scratch: the rows' gradients d_out [R, c], d_act [R, h] (and SwiGLU's d_fc
//   [R, f]), d_in [R, c], and the gates' and logits' gradients [m, k], [m, E] float32;
//   with G_z > 1 every local expert's fc and proj gathered, [c, f] and [h, c].
// With expert parallelism (P > 1) the experts' rows live on two sides: the send side keeps R
// rows (the rows sent [R, c] and the outputs returned [R, c]; in backward the outputs'
// gradients sent and the rows' gradients returned, [R, c] each), and the expert side is
// allocated for the most rows its experts can receive, R_max = MoeShape::expert_rows (the
// expert rows above with R_max for R). Split over the y group (MoeShape::y_shares = G_y > 1),
// three more scratch buffers: the share packed to send [R_max, c], the share received in G_y
// copies [R_max + G_y·P, c] (each block's share is at most one row over its 1/G_y), and the
// y group's shares gathered [R_max, c].
// With the all-gather dispatch (MoeShape::gathers) there is no send side; instead the group's
// tokens gathered [P·m, c] (reused for the outputs' gradients) and the outputs' partial sums
// [P·m, c] (reused for the inputs'), the routing sent and gathered [m, 2k] and [P·m, 2k],
// the gates' gradients [P·m, k] and every token's slot among the expert rows [P·m, k], each
// expert row's token and gate [R_max] (4-byte values).
void add_moe_layers(MemoryEstimate& mem, const ModelShape& model, const Layout& g, const BatchSplit& split,
                    int64_t e) {
  const MoeShape moe = moe_shape(model, split, g);
  if (moe.layers == 0) return;
  const int64_t m = split.tokens, R = moe.rows, E = moe.experts, k = moe.top_k;
  const int64_t R_max = moe.expert_rows, send_side = moe.expert_ranks > 1 && !moe.gathers ? 2 * R : 0;
  const int64_t c = model.hidden / g.x, h = model.ffn() / g.y, f = model.fc_width() / g.y;
  const int64_t d_fc = model.mlp == Mlp::swiglu ? f : 0;  // SwiGLU's backward is not in place
  mem.activations +=
      moe.layers * ((send_side * c + 2 * R_max * c + R_max * (f + h)) * e + 4 * (2 * m * E + 3 * m * k + 2 * R));
  mem.workspace += moe.layers * ((send_side * c + 2 * R_max * c + R_max * (h + d_fc)) * e + 4 * (m * k + m * E));
  if (moe.y_shares > 1) mem.workspace += moe.layers * (3 * R_max + moe.y_shares * moe.expert_ranks) * c * e;
  if (moe.gathers) {
    const int64_t group_tokens = moe.expert_ranks * m;
    mem.workspace += moe.layers * (2 * group_tokens * c * e + 4 * (2 * m * k + 4 * group_tokens * k + 2 * R_max));
  }
  if (g.z > 1) mem.gathered_weights += moe.layers * moe.local_experts * c * (f + h) * e;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

namespace {

// A memory copy's shares per rank: staging 1, the newest two steps of its own shard and of its
// buddy's 4 (MemoryEstimate::memory_copies).
constexpr int64_t kMemoryCopyShares = 5;

// One rank's share of a checkpoint: 12 bytes (parameter, m, v) per parameter over the world.
int64_t memory_copy_share(const ModelShape& model, const Layout& g) {
  return (parameters_total(model) * 12 + g.world() - 1) / g.world();
}

}  // namespace

MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& g, MemoryModes modes) {
  const Recompute mode = modes.recompute;
  const int64_t e = element_size(input.batch.dtype);
  const bool shard = shards_optimizer(g, modes.shard_optimizer);
  const ShardedCount p = sharded_count(input.model, g, shard);
  const BatchSplit split = batch_split(input.model, input.batch, g);
  MemoryEstimate mem;
  mem.recompute = mode;
  mem.shard_optimizer = shard;
  mem.parameters = p.stored * e;
  // The gradients (float32) of every parameter; Adam m and v (float32) and, when e = 2, the
  // float32 master weights of the parameters this rank's optimizer state covers: all of them,
  // or sharded its pieces.
  mem.optimizer = p.stored * 4 + p.owned * (4 + 4 + (e == 2 ? 4 : 0));
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
    mem.gathered_weights += gathered_weight_blocks(input.model, mode, overlaps_comm(input, g)) * one_block * e;
    mem.gathered_grad = (largest + largest_in_blocks) * 4;  // gradients are float32
  }
  const ActivationParts parts = activation_parts(input.model, g, split.tokens, split.micro_batch);
  mem.activations = activation_elements(parts, input.model.layers, mode) * e;
  mem.workspace = workspace_elements(input.model, g, split.tokens) * e;
  add_moe_layers(mem, input.model, g, split, e);
  if (input.memory_copies) mem.memory_copies = kMemoryCopyShares * memory_copy_share(input.model, g);
  return mem;
}

MemoryEstimate estimate_memory(const ChooserInput& input, const Layout& g) {
  return estimate_memory(input, g, resolved_modes(input, g));
}

double usable_memory(const Machine& machine) { return machine.memory_bytes * (1.0 - machine.memory_headroom); }

namespace {

// Whether "auto" tries the optimizer sharded at `g`: when it can be (shards_optimizer).
bool auto_tries_sharding(const ChooserInput& input, const Layout& g) {
  return !input.shard_optimizer && shards_optimizer(g, true);
}

// The modes "auto" tries at `g`, in order (resolved_modes). Throws LayoutError when the job
// forces a mode the layout cannot run (sharding_problem).
std::vector<MemoryModes> modes_to_try(const ChooserInput& input, const Layout& g) {
  if (const std::string problem = sharding_problem(input, g); !problem.empty()) throw LayoutError(problem);
  std::vector<Recompute> recomputes(kRecomputeModes.begin(), kRecomputeModes.end());
  if (input.recompute) recomputes = {*input.recompute};
  std::vector<bool> shards = {false};
  if (input.shard_optimizer) shards = {*input.shard_optimizer};
  if (auto_tries_sharding(input, g)) shards.push_back(true);
  std::vector<MemoryModes> out;
  for (Recompute r : recomputes)
    for (bool shard : shards) out.push_back({r, shards_optimizer(g, shard)});
  return out;
}

double need_at(const ChooserInput& input, const Layout& g, MemoryModes modes) {
  return static_cast<double>(estimate_memory(input, g, modes).total());
}

}  // namespace

std::string sharding_problem(const ChooserInput& input, const Layout& g) {
  if (!input.shard_optimizer || !*input.shard_optimizer || g.experts == 1) return "";
  const std::string ep = std::to_string(g.experts);
  return "training.shard_optimizer = true and expert parallelism e" + ep + " (layout " + format_layout(g) +
         ") do not go together: the experts' gradients are reduced over the expert_data axis, which the sharded "
         "optimizer does not support; set training.shard_optimizer = false or \"auto\", or use a layout without "
         "'e" + ep + "' (E_p = 1)";
}

MemoryModes resolved_modes(const ChooserInput& input, const Layout& g) {
  const std::vector<MemoryModes> tries = modes_to_try(input, g);
  const double usable = usable_memory(input.machine);
  for (const MemoryModes& m : tries)
    if (need_at(input, g, m) <= usable) return m;
  return tries.back();
}

Recompute resolved_recompute(const ChooserInput& input, const Layout& g) { return resolved_modes(input, g).recompute; }

std::string recompute_reason(const ChooserInput& input, const Layout& g) {
  if (input.recompute) return std::string("training.recompute = ") + recompute_name(*input.recompute);
  const double usable = usable_memory(input.machine);
  std::string tried;  // the modes that do not fit, with what they need
  Recompute last = Recompute::none;
  bool first = true;
  for (const MemoryModes& m : modes_to_try(input, g)) {
    const double need = need_at(input, g, m);
    const bool both = auto_tries_sharding(input, g);  // each mode tried unsharded, then sharded
    if (need <= usable)
      return "auto: " + (tried.empty() ? "" : tried + ", more than usable; ") + recompute_name(m.recompute) +
             (both && m.shard_optimizer ? " fits sharded: " : " fits: ") + gib(need) + " of " + gib(usable) + " usable";
    if (first || m.recompute != last)
      tried += (tried.empty() ? "" : ", ") + std::string(recompute_name(m.recompute)) + " needs " + gib(need);
    else
      tried += ", " + gib(need) + " sharded";
    first = false;
    last = m.recompute;
  }
  return "auto: " + tried + ", each more than the " + gib(usable) + " usable: block, the least";
}

std::string shard_reason(const ChooserInput& input, const Layout& g) {
  const std::string setting =
      input.shard_optimizer ? std::string("training.shard_optimizer = ") + (*input.shard_optimizer ? "true" : "false")
                            : "";
  if (g.data == 1) return (setting.empty() ? "" : setting + ", but ") + "G_data = 1: nothing to shard";
  if (g.experts > 1 && setting.empty())
    return "auto: off: expert parallelism e" + std::to_string(g.experts) +
           " reduces the experts' gradients over expert_data, which the sharded optimizer does not support";
  if (!setting.empty()) return setting;
  const MemoryModes chosen = resolved_modes(input, g);
  const double usable = usable_memory(input.machine);
  const double off = need_at(input, g, {chosen.recompute, false});
  const double on = need_at(input, g, {chosen.recompute, true});
  const std::string at = std::string(" at recompute ") + recompute_name(chosen.recompute);
  if (chosen.shard_optimizer) {
    if (on > usable) return "auto: on: nothing fits; sharded" + at + " needs the least, " + gib(on);
    return "auto: on:" + at + " the optimizer unsharded needs " + gib(off) + ", more than the " + gib(usable) +
           " usable; sharded " + gib(on) + " fits";
  }
  return "auto: off: unsharded fits" + at + " (" + gib(off) + " of " + gib(usable) + " usable); sharding would save " +
         gib(off - on) +
         ", but the all-gather of the updated weights after the optimizer step is not hidden behind compute, as "
         "the all-reduce it halves is behind the backward";
}

std::string memory_formula(const ChooserInput& input, const Layout& g) {
  const MemoryModes modes = resolved_modes(input, g);
  const Recompute mode = modes.recompute;
  const MemoryEstimate mem = estimate_memory(input, g, modes);
  const ParameterCount p = parameters_per_rank(input.model, g);
  const ShardedCount sc = sharded_count(input.model, g, modes.shard_optimizer);
  const BatchSplit split = batch_split(input.model, input.batch, g);
  const int e = static_cast<int>(element_size(input.batch.dtype));
  const std::string state = std::string("4 adam_m + 4 adam_v") + (e == 2 ? " + 4 master" : "");
  std::string s;
  s += "memory per GPU for layout " + format_layout(g) + " (e = " + std::to_string(e) + " bytes, " +
       element_type_name(input.batch.dtype) + ", recompute " + recompute_name(mode) + ", optimizer " +
       (mem.shard_optimizer ? "sharded over " + std::to_string(g.data) + " data ranks" : std::string("unsharded")) +
       "):\n";
  if (mem.shard_optimizer) {
    s += "  parameters        P_rank*e = (" + std::to_string(p.big) + " sharded + " + std::to_string(p.small) +
         " small + " + std::to_string(sc.stored - p.total()) + " padding to G_data pieces) * " + std::to_string(e) +
         " = " + gib(static_cast<double>(mem.parameters)) + "\n";
    s += "  optimizer         P_rank*4 grad + P_piece*(" + state +
         "), P_piece = sum of ceil(bucket/G_data) = " + std::to_string(sc.owned) + " = " +
         gib(static_cast<double>(mem.optimizer)) + "\n";
  } else {
    s += "  parameters        P_rank*e = (" + std::to_string(p.big) + " sharded + " + std::to_string(p.small) +
         " small) * " + std::to_string(e) + " = " + gib(static_cast<double>(mem.parameters)) + "\n";
    s += "  optimizer         P_rank*(4 grad + " + state + ") = " + gib(static_cast<double>(mem.optimizer)) + "\n";
  }
  const int64_t held = gathered_weight_blocks(input.model, mode, overlaps_comm(input, g));
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
  if (input.memory_copies)
    s += "  memory copies     5 * 12 P / world bytes of host memory (staging, and two steps of this rank's shard "
         "and its buddy's in the node's tmpfs), not the GPU's = " +
         gib(static_cast<double>(mem.memory_copies)) + "\n";
  s += "  recompute         " + recompute_reason(input, g) + "\n";
  s += "  optimizer state   " + shard_reason(input, g) + "\n";
  s += "  overlap           " + overlap_reason(input, g) + "\n";
  return s;
}

}  // namespace axonn
