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
    wait(*head, true, peer, tag);
    uint64_t piece = 1;
    for (size_t at = 0; at < bytes.size(); at += kPieceBytes, ++piece) {
      const size_t n = std::min(kPieceBytes, bytes.size() - at);
      auto body = context_->createUnboundBuffer(const_cast<char*>(bytes.data() + at), n);  // Gloo only reads it
      body->send(peer, slot(tag, piece));
      wait(*body, true, peer, tag);
    }
  } catch (const gloo::Exception& e) {
    throw CommError("sending between " + where(peer, tag) + " failed: " + e.what());
  }
}

void PeerLink::wait(gloo::transport::UnboundBuffer& buffer, bool sending, int peer, uint32_t tag) {
  const auto stopped = [&] {
    return CommError((sending ? "sending between " : "receiving between ") + where(peer, tag) +
                     " stopped: this rank is leaving after a failure");
  };
  {
    const std::lock_guard lock(mu_);
    if (aborted_) throw stopped();
    waiting_.emplace_back(&buffer, sending);
  }
  bool done = false;
  try {
    done = sending ? buffer.waitSend(timeout_) : buffer.waitRecv(timeout_);
  } catch (...) {
    const std::lock_guard lock(mu_);
    std::erase(waiting_, std::pair{&buffer, sending});
    throw;
  }
  const std::lock_guard lock(mu_);
  std::erase(waiting_, std::pair{&buffer, sending});
  if (!done) throw stopped();  // abort() woke it
}

void PeerLink::abort() {
  const std::lock_guard lock(mu_);
  aborted_ = true;
  for (const auto& [buffer, sending] : waiting_) {
    if (sending)
      buffer->abortWaitSend();
    else
      buffer->abortWaitRecv();
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
    wait(*head, false, peer, tag);
    bytes.resize(length);
    uint64_t piece = 1;
    for (size_t at = 0; at < bytes.size(); at += kPieceBytes, ++piece) {
      const size_t n = std::min(kPieceBytes, bytes.size() - at);
      auto body = context_->createUnboundBuffer(bytes.data() + at, n);
      body->recv(peer, slot(tag, piece));
      wait(*body, false, peer, tag);
    }
  } catch (const gloo::Exception& e) {
    throw CommError("receiving between " + where(peer, tag) + " failed: " + e.what());
  }
}

}  // namespace axonn
