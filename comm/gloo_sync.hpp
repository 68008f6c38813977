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
// - Above it, and reduce-scatters, all-gathers and all-to-alls, the ring (all-to-all: n-1
//   shifts) moves pieces of at most kRingPieceBytes, while a call takes at most
//   kMostRingExchanges dependent exchanges (takes()); larger calls stream faster through
//   Gloo's own rings, which keep several messages in flight. Each rank writes its piece to
//   the right, then reads the left's, in lockstep. A write blocks only while its socket holds
//   more than a piece (the receiver's window and the send buffer take one), so only while the
//   right has two of its pieces unread; a rank writes piece k+1 only after reading the left's
//   piece k, so a ring of n holds at most n unread pieces and its writers cannot all block.
//
// Every all-reduce here adds each element in the ring reduce-scatter's order: element i of
// block b (blocks of ceil(count / n), the last one shorter) is ((x_{b+1} + x_{b+2}) + ...) +
// x_b, ranks modulo n. So every rank computes bitwise the same result, and such an all-reduce
// has the bits of a reduce-scatter and an all-gather of the same buffer (the optimizer
// sharded over data, gradient_sync.hpp). bfloat16: the one-message path sums in
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

// The ring's piece, or message_bytes if smaller. Measured in training on loopback (2 cores,
// 2 and 4 ranks), larger pieces stalled for tens of milliseconds at some sizes, in TCP's
// flow control: 64 KiB pieces 110 ms per z all-gather of 256 KiB on 4 ranks, 32 KiB pieces
// 5 ms per x all-reduce of 256 KiB on 2; 16 KiB pieces never did, and 8 KiB pieces were
// slower everywhere.
inline constexpr size_t kRingPieceBytes = size_t{16} << 10;

// The most dependent piece exchanges (ring steps x pieces per block) a call takes here. Each
// waits for every rank of the ring to be scheduled once, where Gloo's ring streams a whole
// block per step: measured on 2 cores (bench_comm), this ring was faster up to 1 MiB on 2
// ranks and 256 KiB on 4, and took 1.5x Gloo's time at 1 MiB on 4 (64 and 96 exchanges of
// 16 KiB pieces).
inline constexpr size_t kMostRingExchanges = 64;

class GlooSyncCollectives {
 public:
  // members: the group's world ranks, for errors.
  // context: connected, used by nothing else; its pairs switch to sync mode at the first
  // collective (not here: a peer may legitimately finish and close right after the
  // bootstrap, and the switch waits up to one 10 ms tick of Gloo's event loop per pair).
  // message_bytes: the one-message all-reduce's largest size (and the ring's piece, if
  // smaller than kRingPieceBytes).
  GlooSyncCollectives(std::vector<int> members, std::shared_ptr<gloo::Context> context, size_t message_bytes);
  ~GlooSyncCollectives();

  size_t message_bytes() const { return message_bytes_; }
  // Whether a call of `kind` over `bytes` (nccl-tests size) runs here: every all-reduce up to
  // message_bytes and barrier, and the rings of at most kMostRingExchanges exchanges.
  bool takes(CollectiveKind kind, size_t bytes) const;
  // The largest call of `kind` (nccl-tests size) that takes() (0: none): larger ones go through
  // Gloo's own collectives. All-reduce on 2, 4 and 8 ranks: 1 MiB, 640 KiB and 512 KiB.
  size_t largest_taken(CollectiveKind kind) const;
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
  // Sync mode, the bound buffers and the sockets' send buffers, once.
  void prepare();
  // One message of 2 x message_bytes to and from every peer, which makes Gloo size each
  // socket's send buffer for two of the largest messages (why: in the .cpp).
  void size_send_buffers();
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
