#include "comm/peer_link.hpp"

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>

#include "comm/communicator.hpp"
#include "comm/gloo_mesh.hpp"
#include "comm/group_spec.hpp"

namespace axonn {
namespace {

// Gloo slots: the tag in the high bits, the piece's index (0: the length) in the low 32.
uint64_t slot(uint32_t tag, uint64_t piece) { return (uint64_t{tag} << 32) | piece; }

}  // namespace

PeerLink::PeerLink(Exchange& exchange, std::chrono::milliseconds timeout, bool single_host, const std::string& key)
    : rank_(exchange.rank()), size_(exchange.size()), timeout_(timeout) {
  GroupSpec everyone{"peers", {}};
  for (int r = 0; r < size_; ++r) everyone.members.push_back(r);
  context_ = connect_gloo_groups(exchange, make_gloo_device(single_host), {everyone}, timeout, key).front();
}

PeerLink::~PeerLink() = default;

std::string PeerLink::where(int peer, uint32_t tag) const {
  return "rank " + std::to_string(rank_) + " and rank " + std::to_string(peer) + " (message " + std::to_string(tag) +
         ")";
}

void PeerLink::send(int peer, uint32_t tag, std::span<const char> bytes) {
  try {
    uint64_t length = bytes.size();
    auto head = context_->createUnboundBuffer(&length, sizeof length);
    head->send(peer, slot(tag, 0));
    head->waitSend(timeout_);
    uint64_t piece = 1;
    for (size_t at = 0; at < bytes.size(); at += kPieceBytes, ++piece) {
      const size_t n = std::min(kPieceBytes, bytes.size() - at);
      auto body = context_->createUnboundBuffer(const_cast<char*>(bytes.data() + at), n);  // Gloo only reads it
      body->send(peer, slot(tag, piece));
      body->waitSend(timeout_);
    }
  } catch (const gloo::Exception& e) {
    throw CommError("sending between " + where(peer, tag) + " failed: " + e.what());
  }
}

std::vector<char> PeerLink::receive(int peer, uint32_t tag) {
  std::vector<char> bytes;
  receive(peer, tag, bytes);
  return bytes;
}

void PeerLink::receive(int peer, uint32_t tag, std::vector<char>& bytes) {
  try {
    uint64_t length = 0;
    auto head = context_->createUnboundBuffer(&length, sizeof length);
    head->recv(peer, slot(tag, 0));
    head->waitRecv(timeout_);
    bytes.resize(length);
    uint64_t piece = 1;
    for (size_t at = 0; at < bytes.size(); at += kPieceBytes, ++piece) {
      const size_t n = std::min(kPieceBytes, bytes.size() - at);
      auto body = context_->createUnboundBuffer(bytes.data() + at, n);
      body->recv(peer, slot(tag, piece));
      body->waitRecv(timeout_);
    }
  } catch (const gloo::Exception& e) {
    throw CommError("receiving between " + where(peer, tag) + " failed: " + e.what());
  }
}

}  // namespace axonn
