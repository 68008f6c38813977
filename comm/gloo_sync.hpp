#pragma once
// The Gloo communicator's collectives on a second set of pairs in Gloo's synchronous mode:
// the caller's thread does the socket reads and writes itself.
//
// Gloo's own collectives hand every message between the caller's thread and Gloo's event
// loop thread, a rendezvous of three messages (send-ready, receive-ready, data) per ring
// step. With more ranks than cores (the CPU trainer's 2 to 8 ranks on a 2-core machine) each
// hand-off waits for a thread to be scheduled: ~5 ms per all-reduce of 4 ranks whatever its
// size, and a 256 KiB all-reduce of 2 ranks 0.6 ms in the median and 2-10 ms in a tenth of
// the calls. Here there is no hand-off and no rendezvous:
//
// - Up to `message_bytes` (AXONN_GLOO_SMALL_BYTES, 64 KiB), an all-reduce (and a barrier)
//   is one message: every rank writes its whole buffer to every peer at once and sums what it
//   reads. Each rank sends (n-1) x size, against the ring's 2(n-1)/n x size, which is why
//   it is only for small sizes.
// - Above it, and every reduce-scatter, all-gather and all-to-all, the ring (all-to-all:
//   n-1 shifts) moves pieces of at most kRingPieceBytes: each rank writes its piece to the
//   right, reads the left's, writes the left an empty receipt and reads the right's. So a
//   rank writes piece k+1 only after the right has read piece k: a socket never holds more
//   than one piece, which fits its send buffer (Gloo sizes it to the message), and no write
//   waits for a reader. The receipts also carry the TCP acknowledgements back (shift()).
//
// Every all-reduce adds each element in the ring reduce-scatter's order: element i of block
// b (blocks of ceil(count / n), the last one shorter) is ((x_{b+1} + x_{b+2}) + ...) + x_b,
// ranks modulo n. So every rank computes bitwise the same result, and an all-reduce has the
// bits of a reduce-scatter and an all-gather of the same buffer at every size (the
// optimizer sharded over data, gradient_sync.hpp). bfloat16: the one-message path sums in
// float32 and rounds once; the ring rounds after each addition, as Gloo's ring does.
#include <gloo/transport/buffer.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"

namespace gloo {
class Context;
}

namespace axonn {

// The ring's piece, or message_bytes if smaller. A message of more than one TCP segment
// (65483 bytes on loopback) flowing one way round a ring waited ~30 ms a piece in training
// (4 ranks, pieces of 64 KiB: 110 ms per all-gather of 256 KiB); pieces of 32 KiB did not.
inline constexpr size_t kRingPieceBytes = size_t{32} << 10;

class GlooSyncCollectives {
 public:
  // members: the group's world ranks, for errors.
  // context: connected, used by nothing else; its pairs switch to sync mode at the first
  // collective (not here: a peer may legitimately finish and close right after the
  // bootstrap, and the switch waits up to one 10 ms tick of Gloo's event loop per pair).
  // message_bytes: the one-message all-reduce's largest size and the ring's piece size.
  GlooSyncCollectives(std::vector<int> members, std::shared_ptr<gloo::Context> context, size_t message_bytes);
  ~GlooSyncCollectives();

  size_t message_bytes() const { return message_bytes_; }
  size_t piece_bytes() const { return piece_bytes_; }
  // buf (count) <- sum over the group. Gloo's read/write timeouts (the context's) bound each
  // wait; errors are gloo::Exception, naming the world rank that did not arrive or whose
  // connection failed (so for every call below).
  void all_reduce(void* buf, size_t count, ElementType type);
  // out (count) <- block `rank` (count elements) of the sum of every rank's in (n x count).
  // In place (out is that block of in), in's other blocks are left holding partial sums.
  void reduce_scatter(const void* in, void* out, size_t count, ElementType type);
  // out (n x count): block r is rank r's in (count); in may be this rank's block of out.
  void all_gather(const void* in, void* out, size_t count, ElementType type);
  // out (n x count): block r is block `rank` of rank r's in (n x count); not in place.
  void all_to_all(const void* in, void* out, size_t count, ElementType type);
  // Every rank sends an empty message to every peer and reads one from each.
  void barrier();

 private:
  // Sync mode and the bound buffers, once.
  void prepare();
  // Sends `bytes` of the staging buffer to every peer and reads every peer's message.
  void exchange_with_all(size_t bytes);
  // Sends send[0, send_bytes) to `to` while receiving recv[0, recv_bytes) from `from`, in
  // pieces of piece_bytes over `span` bytes, which every rank of the step passes alike
  // (so every rank sends and reads as many pieces, empty ones where its bytes end first).
  void shift(int to, const char* send, size_t send_bytes, int from, char* recv, size_t recv_bytes, size_t span);
  // One message of `bytes` from the staging buffer to `peer`; one message from `peer` into
  // its incoming buffer. Errors name the peer's world rank.
  void write_to(int peer, size_t bytes);
  void read_from(int peer);
  // The ring over `work` (count elements in n blocks of `block`, the last ones shorter or
  // empty): reduce-scatter leaves the full sum of block `rank` there; all-gather then fills
  // every other block with its owner's.
  void ring_reduce_scatter(char* work, size_t count, size_t block, ElementType type);
  void ring_all_gather(char* work, size_t count, size_t block, ElementType type);
  void all_reduce_in_one_message(void* buf, size_t count, ElementType type);

  int peer_rank(int offset) const;  // the rank `offset` places to the right, modulo n

  std::vector<int> members_;
  std::shared_ptr<gloo::Context> context_;
  size_t message_bytes_, piece_bytes_;
  std::vector<char> outgoing_;                                         // [message_bytes]
  std::vector<std::vector<char>> incoming_;                            // [size][message_bytes], this rank's unused
  std::vector<std::unique_ptr<gloo::transport::Buffer>> send_, recv_;  // per peer
  std::vector<char> received_;                                         // [block]: the left's partial sums
  std::vector<char> work_;                                             // [n x block]: a copy of reduce_scatter's input
  std::vector<float> sum_;                                             // bfloat16 sums in float32
  bool prepared_ = false;
};

}  // namespace axonn
