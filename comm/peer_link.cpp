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
    : exchange_(exchange),
      rank_(exchange.rank()),
      size_(exchange.size()),
      timeout_(timeout),
      key_(key),
      device_(make_gloo_device(single_host)) {}

PeerLink::~PeerLink() = default;

void PeerLink::connect(std::span<const int> peers) {
  // Each new pair is a group of its two ranks, the lower first, connected in one bootstrap.
  std::vector<GroupSpec> groups;
  for (const int peer : peers) {
    if (peer < 0 || peer >= size_)
      throw CommError("rank " + std::to_string(rank_) + " cannot connect to rank " + std::to_string(peer) +
                      ": the job's ranks are 0-" + std::to_string(size_ - 1));
    if (peer == rank_ || connected_to(peer)) continue;
    GroupSpec pair{"peers", {std::min(rank_, peer), std::max(rank_, peer)}};
    if (std::find_if(groups.begin(), groups.end(), [&](const GroupSpec& g) { return g.members == pair.members; }) ==
        groups.end())
      groups.push_back(std::move(pair));
  }
  const auto contexts =
      connect_gloo_groups(exchange_, device_, groups, timeout_, key_ + "-" + std::to_string(connects_++));
  const std::lock_guard lock(mu_);
  for (size_t i = 0; i < groups.size(); ++i) {
    const bool lower = groups[i].members[0] == rank_;
    pairs_[groups[i].members[lower ? 1 : 0]] = Pair{contexts[i], lower ? 1 : 0};
  }
}

bool PeerLink::connected_to(int peer) const {
  const std::lock_guard lock(mu_);
  return pairs_.count(peer) > 0;
}

PeerLink::Pair PeerLink::pair(int peer, uint32_t tag) const {
  const std::lock_guard lock(mu_);
  const auto it = pairs_.find(peer);
  if (it == pairs_.end())
    throw CommError("no connection between " + where(peer, tag) + ": PeerLink::connect names the peers first");
  return it->second;
}

std::string PeerLink::where(int peer, uint32_t tag) const {
  return "rank " + std::to_string(rank_) + " and rank " + std::to_string(peer) + " (message " + std::to_string(tag) +
         ")";
}

void PeerLink::send(int peer, uint32_t tag, std::span<const char> bytes) {
  try {
    const Pair to = pair(peer, tag);
    uint64_t length = bytes.size();
    auto head = to.context->createUnboundBuffer(&length, sizeof length);
    head->send(to.peer_rank, slot(tag, 0));
    wait(*head, true, peer, tag);
    uint64_t piece = 1;
    for (size_t at = 0; at < bytes.size(); at += kPieceBytes, ++piece) {
      const size_t n = std::min(kPieceBytes, bytes.size() - at);
      auto body = to.context->createUnboundBuffer(const_cast<char*>(bytes.data() + at), n);  // Gloo only reads it
      body->send(to.peer_rank, slot(tag, piece));
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
    const Pair from = pair(peer, tag);
    uint64_t length = 0;
    auto head = from.context->createUnboundBuffer(&length, sizeof length);
    head->recv(from.peer_rank, slot(tag, 0));
    wait(*head, false, peer, tag);
    bytes.resize(length);
    uint64_t piece = 1;
    for (size_t at = 0; at < bytes.size(); at += kPieceBytes, ++piece) {
      const size_t n = std::min(kPieceBytes, bytes.size() - at);
      auto body = from.context->createUnboundBuffer(bytes.data() + at, n);
      body->recv(from.peer_rank, slot(tag, piece));
      wait(*body, false, peer, tag);
    }
  } catch (const gloo::Exception& e) {
    throw CommError("receiving between " + where(peer, tag) + " failed: " + e.what());
  }
}

}  // namespace axonn
