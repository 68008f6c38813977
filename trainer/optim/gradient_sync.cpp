#include "trainer/optim/gradient_sync.hpp"

#include <string>

namespace axonn {

GradientSync::GradientSync(CommGrid& grid, ParameterStore& params, int layers, bool overlap)
    : grid_(grid),
      params_(params),
      overlap_(overlap),
      wte_(&params.layout().bucket("wte")),
      small_(&params.layout().small_bucket()),
      started_(static_cast<size_t>(layers), false) {
  const ParameterLayout& pl = params.layout();
  blocks_.resize(static_cast<size_t>(layers));
  for (const ParamBucket& b : pl.buckets) {
    if (b.name == "small.experts") expert_small_ = &b;
    if (!b.name.starts_with("h.")) continue;
    blocks_.at(static_cast<size_t>(std::stoi(b.name.substr(2)))).push_back(&b);  // "h.3.experts" -> 3
  }
}

CommAxis GradientSync::axis_of(const ParamBucket& b) const {
  return ParameterLayout::holds_experts(b) && grid_.layout().experts > 1 ? CommAxis::expert_data : CommAxis::data;
}

void GradientSync::reduce(const ParamBucket& b) {
  Communicator& group = grid_.axis(axis_of(b));
  float* g = params_.grads() + b.offset;
  if (!params_.sharded()) return group.all_reduce(g, static_cast<size_t>(b.count), ElementType::float32);
  const int64_t piece = b.piece(params_.layout().pieces);
  group.reduce_scatter(g, g + group.rank() * piece, static_cast<size_t>(piece), ElementType::float32);
}

Communicator::Ticket GradientSync::start_reduce(const ParamBucket& b) {
  Communicator& group = grid_.axis(axis_of(b));
  float* g = params_.grads() + b.offset;
  if (!params_.sharded()) return group.start_all_reduce(g, static_cast<size_t>(b.count), ElementType::float32);
  const int64_t piece = b.piece(params_.layout().pieces);
  return group.start_reduce_scatter(g, g + group.rank() * piece, static_cast<size_t>(piece), ElementType::float32);
}

void GradientSync::block_done(int layer) {
  if (!overlap_) return;
  for (const ParamBucket* b : blocks_.at(static_cast<size_t>(layer)))
    last_started_[static_cast<size_t>(axis_of(*b))] = start_reduce(*b);
  started_[static_cast<size_t>(layer)] = true;
}

void GradientSync::finish() {
  for (int a = 0; a < kCommAxisCount; ++a)
    if (last_started_[static_cast<size_t>(a)] != 0) grid_.axis(static_cast<CommAxis>(a)).finish(last_started_[static_cast<size_t>(a)]);
  for (size_t l = blocks_.size(); l-- > 0;)
    if (!started_[l])
      for (const ParamBucket* b : blocks_[l]) reduce(*b);
  started_.assign(started_.size(), false);
  last_started_.assign(last_started_.size(), 0);

  Communicator& z = grid_.axis(CommAxis::z);
  z.all_reduce(params_.grads() + small_->offset, static_cast<size_t>(small_->count), ElementType::float32);
  if (expert_small_)
    z.all_reduce(params_.grads() + expert_small_->offset, static_cast<size_t>(expert_small_->count),
                 ElementType::float32);
  reduce(*wte_);
  reduce(*small_);
  if (expert_small_) reduce(*expert_small_);
}

}  // namespace axonn
