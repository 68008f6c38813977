#pragma once
// This rank's parameters, gradients and both AdamW moments as flat device buffers laid out
// by ParameterLayout (parameters.hpp): sharded weights first (wte, then each block's four
// weights together), then the small tensors, so each data-parallel bucket is one range of
// the gradient buffer (gradient_sync.hpp) and the z all-reduce one call on its small suffix.
//
// With the optimizer sharded over data (training.shard_optimizer, G_data > 1) every bucket
// is padded with zeros to G_data equal pieces, and the moments hold only this rank's piece of
// each bucket (optimizer_state_runs): 1/G_data of the unsharded moments.
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
  // Which elements of params() and grads() the moments cover, and where in them.
  const std::vector<StateRun>& state_runs() const { return runs_; }
  int64_t state_size() const { return state_size_; }

  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  float* adam_m() { return adam_m_.data(); }  // [state_size()]
  float* adam_v() { return adam_v_.data(); }  // [state_size()]
  float* param(const std::string& name) { return params_.data() + layout_.slot(name).offset; }
  float* grad(const std::string& name) { return grads_.data() + layout_.slot(name).offset; }

  // Parameters from the layout-independent init (init.hpp); gradients, moments and the
  // padding zero.
  void initialize(uint64_t seed);
  void zero_grads();

 private:
  Backend& backend_;
  ParameterLayout layout_;
  std::vector<StateRun> runs_;
  int64_t state_size_ = 0;
  DeviceBuffer<float> params_, grads_, adam_m_, adam_v_;
};

}  // namespace axonn
