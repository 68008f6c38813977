#pragma once
// One weight shard's all-gather over z into a buffer of its own: either started ahead of use
// (prefetch, Communicator::start_all_gather, training.overlap_comm) and waited for where the
// weight is used, or run there (complete without a prefetch). Output z-major:
// [G_z][shard_elements], rank z's shard at z·shard_elements.
#include <cstdint>

#include "comm/communicator.hpp"

namespace axonn {

class ZGather {
 public:
  ZGather() = default;  // G_z = 1: never used
  ZGather(Communicator& z, const float* shard, float* out, int64_t shard_elements)
      : z_(&z), shard_(shard), out_(out), count_(static_cast<size_t>(shard_elements)) {}

  void prefetch() {
    ticket_ = z_->start_all_gather(shard_, out_, count_, ElementType::float32);
    prefetched_ = true;
  }
  // `out` holds the gathered shards when it returns (on NCCL: for work queued from now on).
  void complete() {
    if (prefetched_)
      z_->finish(ticket_);
    else
      z_->all_gather(shard_, out_, count_, ElementType::float32);
    prefetched_ = false;
  }

 private:
  Communicator* z_ = nullptr;
  const float* shard_ = nullptr;
  float* out_ = nullptr;
  size_t count_ = 0;
  bool prefetched_ = false;
  Communicator::Ticket ticket_ = 0;
};

}  // namespace axonn
