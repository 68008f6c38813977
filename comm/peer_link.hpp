#pragma once
// Byte messages between any two ranks of the job, beside the training's collectives: a Gloo
// TCP connection to every peer, on its own device (socket) and pairs, so a background
// thread can move megabytes (a memory copy of the state to a rank on another node,
// trainer/train/memory_copies.hpp) while the step's collectives run on the grid's.
//
// A message is its length (8 bytes) then its bytes, in pieces of at most kPieceBytes, so the
// receiver needs no size agreed beforehand. Each message has a tag; a send and its receive
// must use the same tag, and two messages in flight between the same two ranks different
// tags. Errors (a peer that died or never sends) are CommError naming the peer and the tag.
#include <chrono>
#include <cstdint>
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
class UnboundBuffer;
}
}  // namespace gloo

namespace axonn {

class PeerLink {
 public:
  static constexpr size_t kPieceBytes = size_t{64} << 20;

  // Collective over the job (every rank of `exchange` calls it once, with the same key).
  // single_host: every rank runs on this machine (loopback), as CommGrid takes it.
  PeerLink(Exchange& exchange, std::chrono::milliseconds timeout, bool single_host,
           const std::string& key = "peer-link");
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Blocks until the peer has received all of `bytes` (it must call receive(rank(), tag)).
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
  // Waits until `buffer`'s send (or receive) is done, or abort().
  void wait(gloo::transport::UnboundBuffer& buffer, bool sending, int peer, uint32_t tag);
  std::string where(int peer, uint32_t tag) const;

  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::mutex mu_;                                                          // guards what follows
  std::vector<std::pair<gloo::transport::UnboundBuffer*, bool>> waiting_;  // buffers waited on, sending?
  bool aborted_ = false;
};

}  // namespace axonn
