#pragma once
// One weight shard's all-gather over z into a buffer of its own: either started ahead of use
// (prefetch, Communicator::start_all_gather, training.overlap_comm) and waited for where the
// weight is used, or run there (complete without a prefetch). Output z-major:
// [G_z][shard_elements], rank z's shard at z·shard_elements, in the shard's element type
// (the GEMMs' weights: bf16 under mixed precision, half the bytes of float32).
#include <cstdint>

#include "comm/communicator.hpp"
#include "trainer/activation_ptr.hpp"

namespace axonn {

class ZGather {
 public:
  ZGather() = default;  // G_z = 1: never used
  // shard and out of one type.
  ZGather(Communicator& z, ConstActPtr shard, ActPtr out, int64_t shard_elements)
      : z_(&z), shard_(shard), out_(out), count_(static_cast<size_t>(shard_elements)) {
    if (shard.type() != out.type())
      throw BackendError(std::string("ZGather: the shard is ") + element_type_name(shard.type()) + " and the output " +
                         element_type_name(out.type()) + "; gather into a buffer of the shard's type");
  }

  void prefetch() {
    ticket_ = z_->start_all_gather(shard_.raw(), out_.raw(), count_, shard_.type());
    prefetched_ = true;
  }
  // `out` holds the gathered shards when it returns (on NCCL: for work queued from now on).
  void complete() {
    if (prefetched_)
      z_->finish(ticket_);
    else
      z_->all_gather(shard_.raw(), out_.raw(), count_, shard_.type());
    prefetched_ = false;
  }

 private:
  Communicator* z_ = nullptr;
  ConstActPtr shard_;
  ActPtr out_;
  size_t count_ = 0;
  bool prefetched_ = false;
  Communicator::Ticket ticket_ = 0;
};

}  // namespace axonn
