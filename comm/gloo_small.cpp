#include "comm/gloo_small.hpp"

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/pair.h>

#include <algorithm>
#include <cstring>

#include "comm/bfloat16.hpp"

namespace axonn {
namespace {

// The one slot these pairs use: nothing else runs on them.
constexpr int kSlot = 1;

}  // namespace

GlooSmallCollectives::GlooSmallCollectives(std::vector<int> members, std::shared_ptr<gloo::Context> context,
                                           size_t capacity)
    : members_(std::move(members)),
      context_(std::move(context)),
      capacity_(capacity),
      outgoing_(capacity),
      incoming_(static_cast<size_t>(context_->size)),
      send_(static_cast<size_t>(context_->size)),
      recv_(static_cast<size_t>(context_->size)) {}

void GlooSmallCollectives::prepare() {
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer == context_->rank) continue;
    const auto p = static_cast<size_t>(peer);
    auto& pair = context_->getPair(peer);
    // Blocking reads in the caller's thread; busy polling would starve the peers that share
    // the cores. A message that arrived before the switch waits in the socket (or half-read
    // in the pair) and is read by the first waitRecv.
    pair->setSync(true, /*busyPoll=*/false);
    incoming_[p].resize(capacity_);
    // Bound buffers: registered once, so every message has a home whenever it arrives.
    send_[p] = pair->createSendBuffer(kSlot, outgoing_.data(), capacity_);
    recv_[p] = pair->createRecvBuffer(kSlot, incoming_[p].data(), capacity_);
  }
  prepared_ = true;
}

GlooSmallCollectives::~GlooSmallCollectives() = default;

void GlooSmallCollectives::exchange(size_t bytes) {
  if (!prepared_) prepare();
  // Writes first, then reads: a write of at most `capacity` bytes fits the socket's send
  // buffer (Gloo sizes it to the message), so no rank blocks writing while its peers write.
  int peer = 0;
  const char* doing = "writing to";
  try {
    for (peer = 0; peer < context_->size; ++peer) {
      if (peer == context_->rank) continue;
      send_[static_cast<size_t>(peer)]->send(0, bytes);
      send_[static_cast<size_t>(peer)]->waitSend();  // sync mode: already written
    }
    doing = "waiting for";
    for (peer = 0; peer < context_->size; ++peer)
      if (peer != context_->rank) recv_[static_cast<size_t>(peer)]->waitRecv();
  } catch (const gloo::Exception& e) {
    // Here we know who did not arrive (or whose connection failed): say so.
    throw gloo::IoException(std::string(doing) + " world rank " + std::to_string(members_[static_cast<size_t>(peer)]) +
                            ": " + e.what());
  }
}

void GlooSmallCollectives::all_reduce(void* buf, size_t count, ElementType type) {
  const size_t bytes = count * element_size(type);
  std::memcpy(outgoing_.data(), buf, bytes);
  exchange(bytes);
  // Rank r's contribution: this rank's own buffer, or what r sent.
  auto part = [&](int r) -> const void* {
    return r == context_->rank ? outgoing_.data() : incoming_[static_cast<size_t>(r)].data();
  };
  if (type == ElementType::float32) {
    // In the ring reduce-scatter's order (gloo_communicator.cpp): element i of block b (blocks
    // of ceil(count / n), the last one shorter) is ((x_{b+1} + x_{b+2}) + ...) + x_b, ranks
    // modulo n. So an all-reduce here has the bits of a reduce-scatter and an all-gather of the
    // same buffer (the optimizer sharded over data, gradient_sync.hpp).
    auto* out = static_cast<float*>(buf);
    const int n = context_->size;
    const size_t block = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
    for (int b = 0; b < n; ++b) {
      const size_t begin = std::min(count, static_cast<size_t>(b) * block);
      const size_t end = std::min(count, begin + block);
      const int first = (b + 1) % n;
      std::memcpy(out + begin, static_cast<const float*>(part(first)) + begin, (end - begin) * sizeof(float));
      for (int k = 2; k <= n; ++k) {
        const auto* in = static_cast<const float*>(part((b + k) % n));
        for (size_t i = begin; i < end; ++i) out[i] += in[i];
      }
    }
  } else {
    // Summed in float32 and rounded once, the same on every rank.
    sum_.assign(count, 0.0f);
    for (int r = 0; r < context_->size; ++r) {
      const auto* in = static_cast<const uint16_t*>(part(r));
      for (size_t i = 0; i < count; ++i) sum_[i] += bf16_to_float(in[i]);
    }
    auto* out = static_cast<uint16_t*>(buf);
    for (size_t i = 0; i < count; ++i) out[i] = float_to_bf16(sum_[i]);
  }
}

void GlooSmallCollectives::barrier() { exchange(0); }

}  // namespace axonn
