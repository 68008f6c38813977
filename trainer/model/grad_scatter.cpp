#include "trainer/model/grad_scatter.hpp"

#include <string>

namespace axonn {

GradScatter::GradScatter(Backend& backend, Communicator& z, Pair large, Pair small, bool overlap)
    : backend_(&backend), z_(&z), pairs_{large, small}, overlap_(overlap) {}

float* GradScatter::block(int64_t elements) {
  if (elements > pairs_[static_cast<size_t>(next_)].capacity) {
    flush();  // pair 0 may be the one in flight
    next_ = 0;
  }
  const Pair& pair = pairs_[static_cast<size_t>(next_)];
  if (elements > pair.capacity)
    throw BackendError("GradScatter: a dW block of " + std::to_string(elements) +
                       " elements exceeds the largest buffer (" + std::to_string(pair.capacity) + ")");
  return pair.block;
}

void GradScatter::add_to(float* grad, const float* source, int64_t shard) {
  flush();  // the previous layer's: it ran beside this layer's GEMMs
  const Pair& pair = pairs_[static_cast<size_t>(next_)];
  if (!overlap_) {
    z_->reduce_scatter(source, pair.shard, static_cast<size_t>(shard), ElementType::float32);
    backend_->axpy(grad, 1.0f, pair.shard, shard);
  } else {
    const Communicator::Ticket t =
        z_->start_reduce_scatter(source, pair.shard, static_cast<size_t>(shard), ElementType::float32);
    in_flight_ = InFlight{grad, shard, next_, t};
  }
  next_ ^= 1;
}

void GradScatter::flush() {
  if (!in_flight_) return;
  const InFlight f = *in_flight_;
  in_flight_.reset();
  z_->finish(f.ticket);
  backend_->axpy(f.grad, 1.0f, pairs_[static_cast<size_t>(f.pair)].shard, f.shard);
}

}  // namespace axonn
