#pragma once
// Latency path of the Gloo communicator for small messages (the trainer's many all-reduces
// of a few KiB: LayerNorm statistics, losses, gradient norms).
//
// Gloo's ring all-reduce takes 2(n-1) dependent steps, each a rendezvous of three messages
// (send-ready, receive-ready, data) handed between the caller's thread and Gloo's event
// loop thread; with 4 ranks on 2 cores that is ~5 ms per call whatever the size. Here
// every rank writes its whole buffer to every peer at once and sums what it reads, in a fixed
// order per element (the ring reduce-scatter's: gloo_small.cpp), so every rank computes
// bitwise the same result, and the bits of a reduce-scatter and an all-gather of the same
// buffer: one message latency, n-1 writes
// and n-1 reads per rank, on a second set of pairs in Gloo's synchronous mode (the caller's
// thread does the socket reads and writes itself, no hand-off). Each rank sends (n-1) x
// size instead of the ring's 2(n-1)/n x size, which is why it is only for small sizes.
#include <gloo/transport/buffer.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"

namespace gloo {
class Context;
}

namespace axonn {

class GlooSmallCollectives {
 public:
  // members: the group's world ranks, for errors.
  // context: connected, used by nothing else; its pairs switch to sync mode at the first
  // collective (not here: a peer may legitimately finish and close right after the
  // bootstrap, and the switch waits up to one 10 ms tick of Gloo's event loop per pair).
  // capacity: the largest message in bytes.
  GlooSmallCollectives(std::vector<int> members, std::shared_ptr<gloo::Context> context, size_t capacity);
  ~GlooSmallCollectives();

  size_t capacity() const { return capacity_; }
  // buf (count, count * element_size <= capacity) <- sum over the group: float32 in the ring
  // reduce-scatter's order per element, bfloat16 in rank order in float32, rounded once.
  // Gloo's read/write timeouts (the context's) bound each wait; errors are gloo::Exception,
  // naming the world rank that did not arrive or whose connection failed.
  void all_reduce(void* buf, size_t count, ElementType type);
  // Every rank sends an empty message to every peer and reads one from each.
  void barrier();

 private:
  // Sync mode and the bound buffers, once.
  void prepare();
  // Sends `bytes` of the staging buffer to every peer and reads every peer's message.
  void exchange(size_t bytes);

  std::vector<int> members_;
  std::shared_ptr<gloo::Context> context_;
  size_t capacity_;
  std::vector<char> outgoing_;                                         // [capacity]
  std::vector<std::vector<char>> incoming_;                            // [size][capacity], this rank's unused
  std::vector<std::unique_ptr<gloo::transport::Buffer>> send_, recv_;  // per peer
  std::vector<float> sum_;                                             // bfloat16 sums in float32
  bool prepared_ = false;
};

}  // namespace axonn
