#pragma once
// Byte messages between two ranks of the job, beside the training's collectives: a Gloo TCP
// connection to each peer this rank talks to, on its own device (socket) and pairs, so a
// background thread can move megabytes (a memory copy of the state to a rank on another node,
// trainer/train/memory_copies.hpp) while the step's collectives run on the grid's.
//
// Only the pairs connect() names are connected: a memory copy's rank talks to its buddy and
// the ranks it keeps copies for, a restore's to the nodes it takes pieces from. A link to
// every rank would hold world - 1 sockets per rank (1023 at 1024 GPUs, past the usual soft
// limit of 1024 open files) and connect world^2 / 2 pairs through the job at its start.
//
// A message is its length (8 bytes) then its bytes, in pieces of at most kPieceBytes, so the
// receiver needs no size agreed beforehand. Each message has a tag; a send and its receive
// must use the same tag, and two messages in flight between the same two ranks different
// tags. Errors (a peer that died or never sends) are CommError naming the peer and the tag.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/exchange.hpp"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace axonn {

class PeerLink {
 public:
  static constexpr size_t kPieceBytes = size_t{64} << 20;

  // Connects no pair yet (connect() does). `exchange` must outlive the link: connect() uses it.
  // single_host: every rank runs on this machine (loopback), as CommGrid takes it.
  PeerLink(Exchange& exchange, std::chrono::milliseconds timeout, bool single_host,
           const std::string& key = "peer-link");
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // Collective over the job: every rank calls it as often as the others, naming the peers it
  // will send to or receive from. Both ranks of a pair name each other (a rank that names a
  // peer that does not name it back throws CommError). Peers connected already, and this
  // rank, are skipped.
  void connect(std::span<const int> peers);
  bool connected_to(int peer) const;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Blocks until the peer has received all of `bytes` (it must call receive(rank(), tag)).
  // Sending to or receiving from a peer not connected throws CommError.
  void send(int peer, uint32_t tag, std::span<const char> bytes);
  // Blocks until the whole message from `peer` with `tag` has arrived.
  std::vector<char> receive(int peer, uint32_t tag);
  // The same into `into`, resized to the message (a caller that receives often reuses it).
  void receive(int peer, uint32_t tag, std::vector<char>& into);

  // Wakes every send and receive waiting now, and makes every later one fail at once (both
  // throw CommError): for a rank leaving after a failure, whose copy thread would otherwise
  // wait out the timeout for a peer that died (Gloo fails no send a dead peer never takes).
  // Any thread may call it.
  void abort();

 private:
  // A connected peer: the context of the pair and the peer's rank in it (0 or 1).
  struct Pair {
    std::shared_ptr<gloo::Context> context;
    int peer_rank = 0;
  };
  Pair pair(int peer, uint32_t tag) const;  // throws CommError when not connected
  // Waits until `buffer`'s send (or receive) is done, or abort().
  void wait(gloo::transport::UnboundBuffer& buffer, bool sending, int peer, uint32_t tag);
  std::string where(int peer, uint32_t tag) const;

  Exchange& exchange_;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  std::string key_;
  std::shared_ptr<gloo::transport::Device> device_;
  int connects_ = 0;                                                       // connect() calls so far
  mutable std::mutex mu_;                                                  // guards what follows
  std::map<int, Pair> pairs_;                                              // by peer
  std::vector<std::pair<gloo::transport::UnboundBuffer*, bool>> waiting_;  // buffers waited on, sending?
  bool aborted_ = false;
};

}  // namespace axonn
