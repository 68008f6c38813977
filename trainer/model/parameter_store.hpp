#pragma once
// This rank's parameters, gradients and AdamW moments as four flat device buffers laid out
// by ParameterLayout (parameters.hpp): sharded weights first (wte, then each block's four
// weights together), then the small tensors, so each data-parallel bucket is one range of
// the gradient buffer (gradient_sync.hpp) and the z all-reduce one call on its small suffix.
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/model/parameters.hpp"

namespace axonn {

class ParameterStore {
 public:
  ParameterStore(Backend& backend, const ModelShape& model, const Layout& layout, const Coords& coords);

  const ParameterLayout& layout() const { return layout_; }
  int64_t size() const { return layout_.total; }

  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  float* adam_m() { return adam_m_.data(); }
  float* adam_v() { return adam_v_.data(); }
  float* param(const std::string& name) { return params_.data() + layout_.slot(name).offset; }
  float* grad(const std::string& name) { return grads_.data() + layout_.slot(name).offset; }

  // Parameters from the layout-independent init (init.hpp); gradients and moments zero.
  void initialize(uint64_t seed);
  void zero_grads();

 private:
  Backend& backend_;
  ParameterLayout layout_;
  DeviceBuffer<float> params_, grads_, adam_m_, adam_v_;
};

}  // namespace axonn
