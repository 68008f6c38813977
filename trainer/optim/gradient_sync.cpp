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
  for (int l = 0; l < layers; ++l) blocks_.push_back(&params.layout().bucket("h." + std::to_string(l)));
}

void GradientSync::reduce(const ParamBucket& b) {
  Communicator& data = grid_.axis(CommAxis::data);
  float* g = params_.grads() + b.offset;
  if (!params_.sharded()) return data.all_reduce(g, static_cast<size_t>(b.count), ElementType::float32);
  const int64_t piece = b.piece(params_.layout().pieces);
  data.reduce_scatter(g, g + data.rank() * piece, static_cast<size_t>(piece), ElementType::float32);
}

Communicator::Ticket GradientSync::start_reduce(const ParamBucket& b) {
  Communicator& data = grid_.axis(CommAxis::data);
  float* g = params_.grads() + b.offset;
  if (!params_.sharded()) return data.start_all_reduce(g, static_cast<size_t>(b.count), ElementType::float32);
  const int64_t piece = b.piece(params_.layout().pieces);
  return data.start_reduce_scatter(g, g + data.rank() * piece, static_cast<size_t>(piece), ElementType::float32);
}

void GradientSync::block_done(int layer) {
  if (!overlap_) return;
  last_started_ = start_reduce(*blocks_.at(static_cast<size_t>(layer)));
  started_[static_cast<size_t>(layer)] = true;
}

void GradientSync::finish() {
  grid_.axis(CommAxis::data).finish(last_started_);
  for (size_t l = blocks_.size(); l-- > 0;)
    if (!started_[l]) reduce(*blocks_[l]);
  started_.assign(started_.size(), false);
  last_started_ = 0;

  grid_.axis(CommAxis::z)
      .all_reduce(params_.grads() + small_->offset, static_cast<size_t>(small_->count), ElementType::float32);
  reduce(*wte_);
  reduce(*small_);
}

}  // namespace axonn
