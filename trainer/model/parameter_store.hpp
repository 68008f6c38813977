#pragma once
// This rank's parameters, gradients and both AdamW moments as flat device buffers laid out
// by ParameterLayout (parameters.hpp): sharded weights first (wte, then each block's four
// weights together), then the small tensors, so each data-parallel bucket is one range of
// the gradient buffer (gradient_sync.hpp) and the z all-reduce one call on its small suffix.
//
// The GEMMs read the sharded weights (the weight buckets, the prefix ParameterLayout::sharded)
// in the backend's activation type: the float32 parameters themselves, or under mixed
// precision (bfloat16) a copy of them, weights().
//
// With the optimizer sharded over data (training.shard_optimizer, G_data > 1) every bucket
// is padded with zeros to G_data equal pieces, and the moments hold only this rank's piece of
// each bucket (optimizer_state_runs): 1/G_data of the unsharded moments. Under mixed
// precision the float32 master weights of the weight buckets are sharded too (master()):
// the bf16 copy is then the only whole copy of those weights, rewritten by the optimizer's
// all-gather after each step, and the float32 parameters hold the small tensors only.
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/model/parameters.hpp"

namespace axonn {

class ParameterStore {
 public:
  ParameterStore(Backend& backend, const ModelShape& model, const Layout& layout, const Coords& coords,
                 bool shard_optimizer = false);

  const ParameterLayout& layout() const { return layout_; }
  int64_t size() const { return layout_.total; }
  // The optimizer state covers 1/G_data of the buckets (G_data > 1 and asked for).
  bool sharded() const { return layout_.pieces > 1; }
  // Sharded under mixed precision: the weight buckets' float32 weights are master()'s pieces.
  bool master_sharded() const { return master_sharded_; }
  // Which elements of the flat buffers the moments (and master()) cover, and where in them.
  const std::vector<StateRun>& state_runs() const { return runs_; }
  int64_t state_size() const { return state_size_; }
  // The weight buckets' runs come first: master() holds state offsets [0, master_size()).
  int64_t master_size() const { return master_size_; }

  // The float32 parameters at flat offset `offset`: anywhere, or with master_sharded() only
  // in the small tensors (offset >= layout().sharded).
  float* params_at(int64_t offset);
  // All float32 parameters [size()]; throws BackendError with master_sharded().
  float* params();
  float* grads() { return grads_.data(); }
  float* adam_m() { return adam_m_.data(); }  // [state_size()]
  float* adam_v() { return adam_v_.data(); }  // [state_size()]
  float* master() { return master_.data(); }  // [master_size()], master_sharded() only
  float* param(const std::string& name) { return params_at(layout_.slot(name).offset); }
  float* grad(const std::string& name) { return grads_.data() + layout_.slot(name).offset; }
  // As param() and grad(), or null where the model has no such tensor (a bias of a model
  // without biases, LayerNorm's beta beside RMSNorm).
  float* param_if_any(const std::string& name) { return layout_.has(name) ? param(name) : nullptr; }
  float* grad_if_any(const std::string& name) { return layout_.has(name) ? grad(name) : nullptr; }
  // The GEMMs' copy of the weight buckets [layout().sharded], in the activation type.
  ActPtr weights() { return weights_; }
  // Rewrites a bf16 copy from the whole float32 parameters (mixed precision, unsharded
  // master: the model calls it every micro-batch, so nothing can leave it stale); nothing to
  // do when the copy is the parameters or when the optimizer keeps it (master_sharded()).
  void refresh_weights();

  // Parameters from the layout-independent init (init.hpp); gradients, moments and the
  // padding zero.
  void initialize(uint64_t seed);
  // Every buffer zero, the parameters too: the state a checkpoint's load fills (it writes every
  // parameter, and the moments or zeros them, but not the padding), without initialize()'s
  // draw, which is most of the set-up of a large model.
  void zero();
  // Sets every parameter from `host` [size()], this rank's whole shard in flat order (an
  // init, a checkpoint's): the float32 parameters, the master pieces and the bf16 copy.
  void set_params(const float* host);
  void zero_grads();

 private:
  Backend& backend_;
  ParameterLayout layout_;
  std::vector<StateRun> runs_;
  int64_t state_size_ = 0;
  bool master_sharded_ = false;
  int64_t master_size_ = 0;
  DeviceBuffer<float> params_;  // [size()], or with master_sharded() the small tensors from layout().sharded on
  DeviceBuffer<float> grads_, adam_m_, adam_v_, master_;
  DeviceBuffer<std::byte> weights_copy_;  // the bf16 copy; empty when the GEMMs read params_
  ActPtr weights_;
};

}  // namespace axonn
