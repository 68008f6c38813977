#include "trainer/optim/gradient_sync.hpp"

#include <string>

namespace axonn {

GradientSync::GradientSync(CommGrid& grid, ParameterStore& params, int layers, bool overlap)
    : grid_(grid), params_(params), overlap_(overlap), started_(static_cast<size_t>(layers), false) {
  const ParameterLayout& layout = params.layout();
  for (int l = 0; l < layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const ParamSlot& first = layout.slot(p + "attn.qkv.weight");
    const ParamSlot& last = layout.slot(p + "mlp.proj.weight");
    blocks_.push_back({first.offset, last.offset + last.count - first.offset});
  }
  const ParamSlot& wte = layout.slot("wte");
  wte_ = {wte.offset, wte.count};
  small_ = {layout.sharded, layout.small()};
}

void GradientSync::all_reduce_over_data(const Range& r) {
  grid_.axis(CommAxis::data)
      .all_reduce(params_.grads() + r.offset, static_cast<size_t>(r.count), ElementType::float32);
}

void GradientSync::block_done(int layer) {
  if (!overlap_) return;
  const Range& r = blocks_.at(static_cast<size_t>(layer));
  last_started_ = grid_.axis(CommAxis::data)
                      .start_all_reduce(params_.grads() + r.offset, static_cast<size_t>(r.count), ElementType::float32);
  started_[static_cast<size_t>(layer)] = true;
}

void GradientSync::finish() {
  Communicator& data = grid_.axis(CommAxis::data);
  data.finish(last_started_);
  for (size_t l = blocks_.size(); l-- > 0;)
    if (!started_[l]) all_reduce_over_data(blocks_[l]);
  started_.assign(started_.size(), false);
  last_started_ = 0;

  grid_.axis(CommAxis::z)
      .all_reduce(params_.grads() + small_.offset, static_cast<size_t>(small_.count), ElementType::float32);
  all_reduce_over_data(wte_);
  all_reduce_over_data(small_);
}

}  // namespace axonn
