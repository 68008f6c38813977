#include "layout/memory_bound_bytes.hpp"

#include "layout/element_type.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// Indices into linear_shapes: qkv, attn.proj, mlp.fc, mlp.proj, head.
constexpr size_t kQkv = 0, kProj = 1, kFc = 2, kFcProj = 3, kHead = 4;

// One block's memory-bound elements per micro-batch, split by what recomputation reruns.
struct BlockElements {
  double ln1_forward = 0, ln2_forward = 0;
  double bias_forward[4] = {};  // qkv, attn.proj, mlp.fc, mlp.proj
  double rope_forward = 0;      // q and k rotated in place
  double gelu_forward = 0;      // or SwiGLU's
  double backward = 0;          // every backward pass of the block
  double forward() const {
    return ln1_forward + ln2_forward + bias_forward[0] + bias_forward[1] + bias_forward[2] + bias_forward[3] +
           rope_forward + gelu_forward;
  }
};

BlockElements block_elements(const ChooserInput& input, const Layout& g, double m) {
  const ModelShape& model = input.model;
  const auto layers = linear_shapes(model);
  const bool epilogues = input.machine.gemm_epilogues;
  const double residual = m * static_cast<double>(model.hidden / g.x);  // (m, C/G_x)
  const double fc_width = m * static_cast<double>(layers[kFc].n / g.size(layers[kFc].n_axis()));
  BlockElements b;
  // LayerNorm reads x for its sums, its centered squares and its output; RMSNorm has no mean.
  b.ln1_forward = b.ln2_forward = (model.norm == Norm::layernorm ? 4 : 3) * residual;
  b.backward = 2 * 4 * residual;
  for (size_t i = kQkv; i <= kFcProj && model.bias; ++i) {
    const double out = m * static_cast<double>(layers[i].n / g.size(layers[i].n_axis()));
    const bool fused = epilogues && g.size(layers[i].k_axis) == 1;
    b.bias_forward[i] = fused ? 0 : 2 * out;
    b.backward += epilogues ? 0 : out;  // the column sums, else BGRADA inside the dW GEMM
  }
  if (model.positions == Positions::rope) {  // read and write q and k, and dq and dk
    b.rope_forward = 2 * m * static_cast<double>((model.heads + model.kv()) * model.head_dim() / g.y);
    b.backward += b.rope_forward;
  }
  if (model.mlp == Mlp::swiglu) {  // gate | up in, their product out; backward also reads dout
    b.gelu_forward = 1.5 * fc_width;
    b.backward += 2.5 * fc_width;
  } else {
    const bool gelu_fused = epilogues && g.x == 1;
    b.gelu_forward = (gelu_fused ? 1 : 2) * fc_width;
    b.backward += (gelu_fused ? 1 : 3) * fc_width;
  }
  return b;
}

// The forward elements recomputation reruns in one recomputed block.
double rerun_elements(const BlockElements& b, Recompute mode) {
  switch (mode) {
    case Recompute::none:
      return 0;
    case Recompute::attention:
      return b.ln1_forward + b.bias_forward[kQkv] + b.rope_forward;
    case Recompute::block:
      return b.ln1_forward + b.ln2_forward + b.bias_forward[kQkv] + b.rope_forward + b.bias_forward[kProj] +
             b.bias_forward[kFc] + b.gelu_forward;
  }
  return 0;
}

}  // namespace

double block_memory_bound_elements(const ChooserInput& input, const Layout& g) {
  const BlockElements b =
      block_elements(input, g, static_cast<double>(batch_split(input.model, input.batch, g).tokens));
  return b.forward() + b.backward;
}

double memory_bound_bytes_per_rank(const ChooserInput& input, const Layout& g, MemoryModes modes) {
  const ModelShape& model = input.model;
  const BatchSplit split = batch_split(model, input.batch, g);
  const double m = static_cast<double>(split.tokens);
  const double act = static_cast<double>(element_size(input.batch.dtype));
  const auto layers = linear_shapes(model);

  const BlockElements block = block_elements(input, g, m);
  const double residual = m * static_cast<double>(model.hidden / g.x);
  const double logits = m * static_cast<double>(layers[kHead].n / g.size(layers[kHead].n_axis()));
  const double activation_elements =
      static_cast<double>(model.layers) * (block.forward() + block.backward) +
      static_cast<double>(recomputed_blocks(model, modes.recompute)) * rerun_elements(block, modes.recompute) +
      (2 + 4) * residual + 3 * logits;
  double per_micro = activation_elements * act;
  const ParameterCount params = parameters_per_rank(model, g);
  if (input.batch.dtype != ElementType::float32) per_micro += 6.0 * static_cast<double>(params.big);

  const ShardedCount held = sharded_count(model, g, modes.shard_optimizer);
  const double per_step = 28.0 * static_cast<double>(held.owned) + 4.0 * static_cast<double>(held.stored);
  return per_micro * split.accumulation + per_step;
}

}  // namespace axonn
