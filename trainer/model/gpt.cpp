#include "trainer/model/gpt.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "layout/model_plan.hpp"
#include "trainer/model/dist_ops.hpp"
#include "trainer/model/rope_table.hpp"

namespace axonn {

// One transformer block's layers, normalization parameters and saved activations.
struct Gpt::Block {
  ShardedLinear qkv, proj;
  std::optional<ShardedLinear> fc, mlp_proj;  // a dense block's MLP
  std::unique_ptr<MoeLayer> moe;              // an MoE block's
  const float *ln1_gamma, *ln1_beta, *ln2_gamma, *ln2_beta;  // the betas null without them
  float *d_ln1_gamma, *d_ln1_beta, *d_ln2_gamma, *d_ln2_beta;
  // Saved for backward (the block's input is residual_[l]); set after construction. Under
  // recomputation several blocks point to one set of buffers (Gpt's header).
  ActPtr ln1_out = nullptr;                        // [m, c]
  float *ln1_mean = nullptr, *ln1_rstd = nullptr;  // [m] (no mean under RMSNorm)
  ActPtr qkv_out = nullptr;                        // [m, qkv]: q and k rotated under RoPE
  float* lse = nullptr;                            // [mb, h, T]: attention's row log-sum-exp
  ActPtr attention_out = nullptr;                  // [m, cy]
  ActPtr residual_mid = nullptr;                   // [m, c]: input + attention branch
  ActPtr ln2_out = nullptr;                        // [m, c]
  float *ln2_mean = nullptr, *ln2_rstd = nullptr;
  ActPtr fc_out = nullptr;   // [m, fc]: the MLP's pre-activation (SwiGLU's gate | up)
  ActPtr act_out = nullptr;  // [m, f]: gelu(fc_out), or silu(gate)·up
};

ConstActPtr Gpt::weight(const std::string& name) const {
  const ParamSlot& slot = params_.layout().slot(name);
  if (slot.offset + slot.count > params_.layout().sharded)
    throw BackendError("Gpt: parameter " + name + " is not a sharded weight; the GEMMs' copy holds only those");
  return params_.weights() + slot.offset;
}

Gpt::Gpt(Backend& backend, CommGrid& grid, const ModelShape& model, int micro_batch, ParameterStore& params,
         bool overlap_comm, Recompute recompute, int64_t tp_chunks)
    : backend_(backend),
      arena_(backend),
      grid_(grid),
      model_(model),
      params_(params),
      norm_(model.norm, model.norm_eps),
      overlap_comm_(overlap_comm),
      recompute_(recompute) {
  const Layout& g = grid.layout();
  const int64_t C = model.hidden, T = model.sequence, V = model.vocab;
  mb_ = micro_batch;
  m_ = mb_ * T;
  c_ = C / g.x;
  cy_ = C / g.y;
  heads_ = model.heads / g.y;
  kv_heads_ = model.kv() / g.y;
  head_dim_ = model.head_dim();
  qkv_local_ = model.qkv_width() / g.y;
  fc_local_ = model.fc_width() / g.y;
  ffn_local_ = model.ffn() / g.y;
  const int64_t m = m_, c = c_, cy = cy_, v = V / g.y;
  const bool z_split = g.z > 1;
  auto gathered = [&](int64_t elements) { return z_split ? arena_.act(elements) : nullptr; };
  auto mean_buffer = [&] { return norm_.keeps_mean() ? arena_.floats(m) : nullptr; };

  const Embeddings::Weight head =
      model.tie_embeddings ? Embeddings::Weight{} : Embeddings::Weight{weight("lm_head.weight"), params.grad("lm_head.weight")};
  embedding_ = std::make_unique<Embeddings>(backend, grid, V, C, Embeddings::Weight{weight("wte"), params.grad("wte")},
                                            head, gathered(v * c), z_split ? arena_.floats(v * c) : nullptr,
                                            overlap_comm, tp_chunks);
  if (model.positions == Positions::rope) {
    const RopeScaling* scaling = model.rope_scaling ? &*model.rope_scaling : nullptr;
    const std::vector<float> table = rope_cos_sin(T, head_dim_, model.rope_theta, scaling);
    rope_cos_sin_ = arena_.floats(static_cast<int64_t>(table.size()));
    backend.copy_to_device(rope_cos_sin_, table.data(), table.size() * sizeof(float));
  }
  // The blocks' gathered weights: a set of four per block, or one or two sets the blocks take
  // turns on (block recomputation), as the layout model counts them (model_plan.hpp).
  gathered_sets_ = static_cast<size_t>(std::max<int64_t>(1, gathered_weight_blocks(model, recompute, overlap_comm)));
  std::vector<std::array<ActPtr, 4>> gathered_set(gathered_sets_);
  int64_t largest_block = v * c, largest_block_layer = 0;
  for (int l = 0; l < model.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    std::array<ActPtr, 4>& set = gathered_set[static_cast<size_t>(l) % gathered_sets_];
    auto linear = [&](const std::string& name, int64_t k, int64_t n, Axis k_axis, size_t slot) {
      const int64_t block = k / g.size(k_axis) * (n / g.size(k_axis == Axis::x ? Axis::y : Axis::x));
      largest_block = std::max(largest_block, block);
      largest_block_layer = std::max(largest_block_layer, block);
      if (!set[slot]) set[slot] = gathered(block);
      return ShardedLinear(backend, grid, k, n, k_axis, weight(p + name + ".weight"), params.grad(p + name + ".weight"),
                           params.param_if_any(p + name + ".bias"), params.grad_if_any(p + name + ".bias"), set[slot],
                           overlap_comm, tp_chunks);
    };
    const bool moe = model.is_moe_block(l);
    auto b = std::unique_ptr<Block>(new Block{
        linear("attn.qkv", C, model.qkv_width(), Axis::x, 0),
        linear("attn.proj", C, C, Axis::y, 1),
        moe ? std::nullopt : std::optional(linear("mlp.fc", C, model.fc_width(), Axis::x, 2)),
        moe ? std::nullopt : std::optional(linear("mlp.proj", model.ffn(), C, Axis::y, 3)),
        moe ? std::make_unique<MoeLayer>(backend, grid, model, l, micro_batch, params,
                                         weight(p + "mlp.experts.fc.weight"), weight(p + "mlp.experts.proj.weight"),
                                         overlap_comm)
            : nullptr,
        params.param(p + "ln1.weight"),
        params.param_if_any(p + "ln1.bias"),
        params.param(p + "ln2.weight"),
        params.param_if_any(p + "ln2.bias"),
        params.grad(p + "ln1.weight"),
        params.grad_if_any(p + "ln1.bias"),
        params.grad(p + "ln2.weight"),
        params.grad_if_any(p + "ln2.bias"),
    });
    // The attention's intermediates: the block's own, or the first block's under recomputation.
    const Block* first = blocks_.empty() ? nullptr : blocks_.front().get();
    if (recompute == Recompute::none || first == nullptr) {
      b->qkv_out = arena_.act(m * qkv_local_);
      b->lse = arena_.floats(mb_ * heads_ * T);
      b->attention_out = arena_.act(m * cy);
    } else {
      b->qkv_out = first->qkv_out;
      b->lse = first->lse;
      b->attention_out = first->attention_out;
    }
    // The rest but the block's input: the block's own, or the first block's under block recomputation.
    if (recompute != Recompute::block || first == nullptr) {
      b->ln1_out = arena_.act(m * c);
      b->ln1_mean = mean_buffer();
      b->ln1_rstd = arena_.floats(m);
      b->residual_mid = arena_.act(m * c);
      b->ln2_out = arena_.act(m * c);
      b->ln2_mean = mean_buffer();
      b->ln2_rstd = arena_.floats(m);
      b->fc_out = arena_.act(m * fc_local_);
      b->act_out = arena_.act(m * ffn_local_);
    } else {
      b->ln1_out = first->ln1_out;
      b->ln1_mean = first->ln1_mean;
      b->ln1_rstd = first->ln1_rstd;
      b->residual_mid = first->residual_mid;
      b->ln2_out = first->ln2_out;
      b->ln2_mean = first->ln2_mean;
      b->ln2_rstd = first->ln2_rstd;
      b->fc_out = first->fc_out;
      b->act_out = first->act_out;
    }
    if (b->moe) largest_block_layer = std::max(largest_block_layer, b->moe->expert_block());
    blocks_.push_back(std::move(b));
  }
  largest_block = std::max(largest_block, largest_block_layer);
  for (int l = 0; l <= model.layers; ++l) residual_.push_back(arena_.act(m * c));
  lnf_out_ = arena_.act(m * c);
  lnf_mean_ = mean_buffer();
  lnf_rstd_ = arena_.floats(m);
  logits_ = arena_.act(m * v);
  ce_ = {arena_.floats(m), arena_.floats(g.y * m), arena_.floats(m), arena_.floats(2 * m), arena_.floats(m)};

  d_residual_ = arena_.act(m * c);
  d_normed_ = arena_.act(m * c);
  d_mlp_ = arena_.act(m * fc_local_);
  if (model.mlp == Mlp::swiglu) d_act_ = arena_.act(m * ffn_local_);
  d_attention_ = arena_.act(m * cy);
  d_qkv_ = arena_.act(m * qkv_local_);
  ln_partials_ = arena_.floats(2 * m);
  if (z_split) {
    const GradScatter::Pair large{arena_.floats(largest_block), arena_.floats(largest_block / g.z), largest_block};
    const GradScatter::Pair small{arena_.floats(largest_block_layer), arena_.floats(largest_block_layer / g.z), largest_block_layer};
    scatter_ = GradScatter(backend, grid.axis(CommAxis::z), large, small, overlap_comm);
  }
}

Gpt::HeadViews Gpt::head_views() const {
  if (!model_.grouped_attention()) return {cy_, 2 * cy_, qkv_local_, head_dim_};  // [q | k | v], each [h, d]
  const int64_t group = heads_ / kv_heads_, stride = (group + 2) * head_dim_;
  return {group * head_dim_, (group + 1) * head_dim_, qkv_local_, stride};  // per group [q heads | k | v]
}

void Gpt::attend(const Block& b) {
  const HeadViews hv = head_views();
  backend_.attention_forward(b.attention_out, b.lse, b.qkv_out, b.qkv_out + hv.k, b.qkv_out + hv.v, hv.ld, mb_,
                             model_.sequence, heads_, kv_heads_, head_dim_, hv.group_stride);
}

void Gpt::attend_backward(const Block& b) {
  const HeadViews hv = head_views();
  backend_.attention_backward(d_qkv_, d_qkv_ + hv.k, d_qkv_ + hv.v, d_attention_, b.attention_out, b.lse, b.qkv_out,
                              b.qkv_out + hv.k, b.qkv_out + hv.v, hv.ld, mb_, model_.sequence, heads_, kv_heads_,
                              head_dim_, hv.group_stride);
}

// q and k are rotated in place where they lie: MHA's q | k as 2h consecutive heads; grouped,
// each group's query heads and its k, consecutive, a group stride apart.
void Gpt::rotate(ActPtr qkv, bool backward) {
  if (model_.positions != Positions::rope) return;
  const HeadViews hv = head_views();
  const bool grouped = model_.grouped_attention();
  const int64_t groups = grouped ? kv_heads_ : 1, heads = grouped ? heads_ / kv_heads_ + 1 : 2 * heads_;
  for (int64_t s = 0; s < groups; ++s) {
    ActPtr x = qkv + s * hv.group_stride;
    if (backward)
      backend_.rope_backward(x, rope_cos_sin_, mb_, model_.sequence, heads, head_dim_, hv.ld);
    else
      backend_.rope_forward(x, rope_cos_sin_, mb_, model_.sequence, heads, head_dim_, hv.ld);
  }
}

// The MLP's first layer and its activation: fc_out, then act_out of it.
void Gpt::mlp_in(Block& b) {
  if (model_.mlp == Mlp::swiglu) {
    b.fc->forward(b.ln2_out, b.fc_out, m_);
    backend_.swiglu_forward(b.act_out, b.fc_out, m_, ffn_local_);
  } else {
    b.fc->forward_gelu(b.ln2_out, b.fc_out, b.act_out, m_);
  }
}

Gpt::~Gpt() = default;

void Gpt::prefetch_block(size_t l) {
  Block& b = *blocks_[l];
  b.qkv.prefetch_weight();
  b.proj.prefetch_weight();
  if (b.moe) return;  // an MoE layer gathers its experts where it runs them
  b.fc->prefetch_weight();
  b.mlp_proj->prefetch_weight();
}

// The forward's ops for block l, on the same inputs: the block's input residual_[l] (which the
// forward's LayerNorm read as the sum it had just stored, so ln1 of it is the same bits) and
// the weights, so what it writes equals what the forward wrote there.
void Gpt::recompute(size_t l) {
  if (recompute_ == Recompute::none) return;
  Block& b = *blocks_[l];
  const int64_t m = m_, c = c_, C = model_.hidden;
  Communicator& x_group = grid_.axis(CommAxis::x);
  ConstActPtr in = residual_[l];
  if (recompute_ == Recompute::block) {
    norm_.forward(backend_, x_group, b.ln1_out, b.ln1_mean, b.ln1_rstd, in, b.ln1_gamma, b.ln1_beta, m, c, C);
    b.qkv.gather_weight();
  }
  b.qkv.forward(b.ln1_out, b.qkv_out, m);
  rotate(b.qkv_out, false);
  attend(b);
  if (recompute_ != Recompute::block) return;
  b.proj.gather_weight();
  b.proj.forward(b.attention_out, b.residual_mid, m);
  norm_.residual_forward(backend_, x_group, b.residual_mid, b.ln2_out, b.ln2_mean, b.ln2_rstd, b.residual_mid, in,
                         b.ln2_gamma, b.ln2_beta, m, c, C);
  if (b.moe) return;  // an MoE layer keeps its own activations and gathered weights
  b.fc->gather_weight();
  mlp_in(b);
  // mlp.proj's output, the next block's input, is kept; its backward needs the gathered weight.
  b.mlp_proj->gather_weight();
}

void Gpt::forward_backward(const int32_t* tokens, const int32_t* targets, float loss_scale, float* loss_sum,
                           GradientSync* sync) {
  params_.refresh_weights();
  forward(tokens, targets, loss_scale);
  backend_.sum(loss_sum, ce_.loss, m_);
  backward(tokens, sync);
}

void Gpt::evaluate(const int32_t* tokens, const int32_t* targets, float* loss_sum) {
  params_.refresh_weights();
  // loss_scale 0: the classifier's gradient, computed with its forward, is zero and unused.
  forward(tokens, targets, 0.0f);
  backend_.sum(loss_sum, ce_.loss, m_);
}

void Gpt::forward(const int32_t* tokens, const int32_t* targets, float loss_scale) {
  const int64_t m = m_, c = c_, C = model_.hidden, T = model_.sequence;
  Communicator& x_group = grid_.axis(CommAxis::x);

  // Every gathered weight has its own buffer, so all the gathers can be in flight at once;
  // they run in the order the layers use them. When blocks take turns on gathered_sets_ sets
  // (block recomputation), as many blocks' gathers start here, and block l + sets - 1's when
  // block l starts: its set was block l - 1's, which is done.
  if (overlap_comm_) {
    embedding_->prefetch_weight();
    for (size_t l = 0; l < std::min(gathered_sets_, blocks_.size()); ++l) prefetch_block(l);
  }
  embedding_->gather_weight();
  embedding_->embed(tokens, residual_[0], m);
  if (overlap_comm_) embedding_->prefetch_head();  // an untied head's weight, where wte's was
  if (model_.positions == Positions::learned) backend_.position_forward(residual_[0], params_.param("wpe"), mb_, T, c);

  // Each residual add runs inside the normalization that reads the sum (RowNorm::residual_forward):
  // the attention branch's in ln2, the MLP branch's in the next block's ln1, or in ln_f.
  if (!blocks_.empty()) {
    Block& first = *blocks_.front();
    norm_.forward(backend_, x_group, first.ln1_out, first.ln1_mean, first.ln1_rstd, residual_[0], first.ln1_gamma,
                  first.ln1_beta, m, c, C);
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = *blocks_[l];
    ConstActPtr in = residual_[l];
    ActPtr out = residual_[l + 1];
    if (overlap_comm_ && l >= 1 && l + gathered_sets_ - 1 < blocks_.size()) prefetch_block(l + gathered_sets_ - 1);
    b.qkv.gather_weight();
    b.qkv.forward(b.ln1_out, b.qkv_out, m);
    rotate(b.qkv_out, false);
    attend(b);
    b.proj.gather_weight();
    b.proj.forward(b.attention_out, b.residual_mid, m);
    // residual_mid = attention branch + in, and ln2 of it
    norm_.residual_forward(backend_, x_group, b.residual_mid, b.ln2_out, b.ln2_mean, b.ln2_rstd, b.residual_mid, in,
                           b.ln2_gamma, b.ln2_beta, m, c, C);
    if (b.moe) {
      b.moe->forward(b.ln2_out, out, loss_scale);
    } else {
      b.fc->gather_weight();
      mlp_in(b);
      b.mlp_proj->gather_weight();
      b.mlp_proj->forward(b.act_out, out, m);
    }
    if (l + 1 < blocks_.size()) {  // out = MLP branch + residual_mid, and the next block's ln1 of it
      Block& next = *blocks_[l + 1];
      norm_.residual_forward(backend_, x_group, out, next.ln1_out, next.ln1_mean, next.ln1_rstd, out, b.residual_mid,
                             next.ln1_gamma, next.ln1_beta, m, c, C);
    }
  }

  const float* gamma_f = params_.param("ln_f.weight");
  const float* beta_f = params_.param_if_any("ln_f.bias");
  if (blocks_.empty())
    norm_.forward(backend_, x_group, lnf_out_, lnf_mean_, lnf_rstd_, residual_.back(), gamma_f, beta_f, m, c, C);
  else  // the last block's output = its MLP branch + residual_mid, and ln_f of it
    norm_.residual_forward(backend_, x_group, residual_.back(), lnf_out_, lnf_mean_, lnf_rstd_, residual_.back(),
                           blocks_.back()->residual_mid, gamma_f, beta_f, m, c, C);
  embedding_->gather_head();
  embedding_->logits(lnf_out_, logits_, m);
  cross_entropy_forward_backward(backend_, grid_.axis(CommAxis::y), logits_, targets, m, embedding_->v_local(),
                                 embedding_->v0(), loss_scale, ce_);
}

void Gpt::backward(const int32_t* tokens, GradientSync* sync) {
  const int64_t m = m_, c = c_, C = model_.hidden, T = model_.sequence;
  Communicator& x_group = grid_.axis(CommAxis::x);

  // logits_ holds dlogits from the forward; a tied head's weight gradient waits for the
  // embedding's at the end.
  embedding_->logits_backward(logits_, lnf_out_, d_normed_, m, scatter_);
  backend_.memset_zero(d_residual_.raw(), static_cast<size_t>(m * c) * d_residual_.element_bytes());
  norm_.backward(backend_, x_group, d_residual_, params_.grad("ln_f.weight"), params_.grad_if_any("ln_f.bias"),
                 ln_partials_, d_normed_, residual_.back(), lnf_mean_, lnf_rstd_, params_.param("ln_f.weight"), m, c,
                 C);

  // d_residual_ is the gradient of the residual stream; each branch's normalization adds its
  // input gradient to it, on top of the skip path's.
  for (size_t l = blocks_.size(); l-- > 0;) {
    Block& b = *blocks_[l];
    // Block recomputation: block l - 1's gathers into the set block l + 1 has finished with,
    // beside this block's backward (and its rerun).
    if (overlap_comm_ && recompute_ == Recompute::block && l >= 1) prefetch_block(l - 1);
    if (l + 1 < blocks_.size()) recompute(l);
    if (b.moe) {
      b.moe->backward(d_residual_, b.ln2_out, d_normed_, scatter_);
    } else if (model_.mlp == Mlp::swiglu) {
      b.mlp_proj->backward(d_residual_, b.act_out, d_act_, m, scatter_);
      backend_.swiglu_backward(d_mlp_, b.fc_out, d_act_, m, ffn_local_);
      b.fc->backward(d_mlp_, b.ln2_out, d_normed_, m, scatter_);
    } else {
      b.mlp_proj->backward(d_residual_, b.act_out, d_mlp_, m, scatter_, b.fc_out);
      b.fc->backward(d_mlp_, b.ln2_out, d_normed_, m, scatter_);
    }
    norm_.backward(backend_, x_group, d_residual_, b.d_ln2_gamma, b.d_ln2_beta, ln_partials_, d_normed_,
                   b.residual_mid, b.ln2_mean, b.ln2_rstd, b.ln2_gamma, m, c, C);

    b.proj.backward(d_residual_, b.attention_out, d_attention_, m, scatter_);
    attend_backward(b);
    rotate(d_qkv_, true);
    b.qkv.backward(d_qkv_, b.ln1_out, d_normed_, m, scatter_);
    if (sync) {  // the block's weight gradients are final once its last reduce-scatter is in
      scatter_.flush();
      sync->block_done(static_cast<int>(l));
    }
    norm_.backward(backend_, x_group, d_residual_, b.d_ln1_gamma, b.d_ln1_beta, ln_partials_, d_normed_, residual_[l],
                   b.ln1_mean, b.ln1_rstd, b.ln1_gamma, m, c, C);
  }

  if (model_.positions == Positions::learned) backend_.position_backward(params_.grad("wpe"), d_residual_, mb_, T, c);
  embedding_->weight_backward(d_residual_, tokens, m, scatter_);
  scatter_.flush();  // every gradient is in when forward_backward returns
}

MoeStatistics Gpt::moe_statistics() const {
  MoeStatistics sum;
  for (const auto& b : blocks_) {
    if (!b->moe) continue;
    const MoeStatistics& s = b->moe->statistics();
    sum.balance_loss += s.balance_loss;
    sum.routed_pairs += s.routed_pairs;
    sum.dropped_pairs += s.dropped_pairs;
    sum.max_expert_load += s.max_expert_load;
    sum.micro_batches += s.micro_batches;
  }
  return sum;
}

void Gpt::reset_moe_statistics() {
  for (auto& b : blocks_)
    if (b->moe) b->moe->reset_statistics();
}

}  // namespace axonn
