#include "comm/gloo_sync.hpp"

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/pair.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "comm/bfloat16.hpp"
#include "comm/host_sum.hpp"

namespace axonn {
namespace {

// The slot every message of these pairs uses (nothing else runs on them), and the one of the
// first message on each, which sizes its socket's send buffer (prepare()).
constexpr int kSlot = 1;
constexpr int kSizingSlot = 2;

// Bytes [begin, end) of block b of `count` elements in blocks of `block` (the last ones
// shorter or empty), for elements of `element` bytes.
struct ByteRange {
  size_t begin, size;
};
ByteRange block_bytes(int b, size_t count, size_t block, size_t element) {
  const size_t first = std::min(count, static_cast<size_t>(b) * block);
  const size_t last = std::min(count, first + block);
  return {first * element, (last - first) * element};
}

}  // namespace

GlooSyncCollectives::GlooSyncCollectives(std::vector<int> members, std::shared_ptr<gloo::Context> context,
                                         size_t message_bytes)
    : members_(std::move(members)),
      context_(std::move(context)),
      message_bytes_(message_bytes),
      piece_bytes_(std::min(message_bytes, kRingPieceBytes)),
      outgoing_(message_bytes),
      incoming_(static_cast<size_t>(context_->size)),
      send_(static_cast<size_t>(context_->size)),
      recv_(static_cast<size_t>(context_->size)) {}

GlooSyncCollectives::~GlooSyncCollectives() = default;

void GlooSyncCollectives::prepare() {
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer == context_->rank) continue;
    const auto p = static_cast<size_t>(peer);
    auto& pair = context_->getPair(peer);
    // Blocking reads in the caller's thread; busy polling would starve the peers that share
    // the cores. A message that arrived before the switch waits in the socket (or half-read
    // in the pair) and is read by the first waitRecv.
    pair->setSync(true, /*busyPoll=*/false);
    incoming_[p].resize(message_bytes_);
    // Bound buffers: registered once, so every message has a home whenever it arrives.
    send_[p] = pair->createSendBuffer(kSlot, outgoing_.data(), message_bytes_);
    recv_[p] = pair->createRecvBuffer(kSlot, incoming_[p].data(), message_bytes_);
  }
  prepared_ = true;
  size_send_buffers();
}

bool GlooSyncCollectives::takes(CollectiveKind kind, size_t bytes) const {
  const auto n = static_cast<size_t>(context_->size);
  const size_t pieces = std::max<size_t>(1, ((bytes + n - 1) / n + piece_bytes_ - 1) / piece_bytes_);
  switch (kind) {
    case CollectiveKind::barrier:
      return true;
    case CollectiveKind::all_reduce:
      return bytes <= message_bytes_ || 2 * (n - 1) * pieces <= kMostRingExchanges;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
      return (n - 1) * pieces <= kMostRingExchanges;
    default:
      return false;
  }
}

size_t GlooSyncCollectives::largest_taken(CollectiveKind kind) const {
  const auto n = static_cast<size_t>(context_->size);
  if (n < 2) return 0;
  // takes() counts pieces = ceil(ceil(bytes / n) / piece); at most `most` of them per block
  // holds for every size up to n blocks of `most` whole pieces.
  const auto ring_bytes = [&](size_t steps) { return n * (kMostRingExchanges / steps) * piece_bytes_; };
  switch (kind) {
    case CollectiveKind::all_reduce:
      return std::max(message_bytes_, ring_bytes(2 * (n - 1)));
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
      return ring_bytes(n - 1);
    default:
      return 0;
  }
}

int GlooSyncCollectives::peer_rank(int offset) const {
  const int n = context_->size;
  return ((context_->rank + offset) % n + n) % n;
}

namespace {

// Here we know who did not arrive (or whose connection failed): say so.
[[noreturn]] void rethrow_naming(const char* doing, int world_rank, const gloo::Exception& e) {
  throw gloo::IoException(std::string(doing) + " world rank " + std::to_string(world_rank) + ": " + e.what());
}

// One message of `bytes` from `buffer`, to the peer of world rank `world_rank`.
void send_message(gloo::transport::Buffer& buffer, size_t bytes, int world_rank) {
  try {
    buffer.send(0, bytes);
    buffer.waitSend();  // sync mode: already written
  } catch (const gloo::Exception& e) {
    rethrow_naming("writing to", world_rank, e);
  }
}

// One message from the peer of world rank `world_rank` into `buffer`.
void wait_for_message(gloo::transport::Buffer& buffer, int world_rank) {
  try {
    buffer.waitRecv();
  } catch (const gloo::Exception& e) {
    rethrow_naming("waiting for", world_rank, e);
  }
}

}  // namespace

// Gloo sets a pair's SO_SNDBUF to the size of the largest message sent on it so far (the
// kernel doubles it and then no longer grows it), and a write that does not fit waits for the
// peer to acknowledge earlier data. When both ranks of a pair write at once and read only
// after (exchange_with_all), neither reads, so the acknowledgement waits for the receiver's
// delayed-ACK timer: 40 ms on Linux. The tiny job's 2x1x1x2 on 4 ranks hit it in 3 to 4 of
// 100 steps (a 23 KiB all-reduce of 2 ranks on sockets sized by the ring's 16 KiB pieces:
// steps of 45-55 ms against a median of 8 ms). A first message of twice the largest size on
// each pair leaves room for an unacknowledged message of the largest size beside a new one.
// At most 32 MiB: Gloo asks for no more (and the kernel grants at most net.core.wmem_max,
// 208 KiB unless raised, so an AXONN_GLOO_SMALL_BYTES above ~100 KiB loses part of this).
void GlooSyncCollectives::size_send_buffers() {
  constexpr size_t kGlooLargestSendBuffer = size_t{32} << 20;
  const size_t bytes = std::min(2 * message_bytes_, kGlooLargestSendBuffer);
  const auto n = static_cast<size_t>(context_->size);
  std::vector<char> out(bytes);
  std::vector<std::vector<char>> in(n);
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends(n), recvs(n);
  for (size_t p = 0; p < n; ++p) {
    if (p == static_cast<size_t>(context_->rank)) continue;
    auto& pair = context_->getPair(static_cast<int>(p));
    in[p].resize(bytes);
    sends[p] = pair->createSendBuffer(kSizingSlot, out.data(), bytes);
    recvs[p] = pair->createRecvBuffer(kSizingSlot, in[p].data(), bytes);
  }
  for (size_t p = 0; p < n; ++p)
    if (sends[p]) send_message(*sends[p], bytes, members_[p]);
  for (size_t p = 0; p < n; ++p)
    if (recvs[p]) wait_for_message(*recvs[p], members_[p]);
}

void GlooSyncCollectives::exchange_with_all(size_t bytes) {
  if (!prepared_) prepare();
  // Writes first, then reads: a write of at most message_bytes fits the socket's send
  // buffer beside an unacknowledged one (size_send_buffers), so no rank blocks writing while
  // its peers write.
  for (int peer = 0; peer < context_->size; ++peer)
    if (peer != context_->rank) write_to(peer, bytes);
  for (int peer = 0; peer < context_->size; ++peer)
    if (peer != context_->rank) read_from(peer);
}

void GlooSyncCollectives::shift(int to, const char* send, size_t send_bytes, int from, char* recv, size_t recv_bytes,
                                size_t span) {
  if (!prepared_) prepare();
  const size_t pieces = std::max<size_t>(1, (span + piece_bytes_ - 1) / piece_bytes_);
  const auto piece = [&](size_t bytes, size_t begin) {
    return bytes > begin ? std::min(piece_bytes_, bytes - begin) : 0;
  };
  for (size_t k = 0; k < pieces; ++k) {
    const size_t begin = k * piece_bytes_;
    const size_t out = piece(send_bytes, begin), in = piece(recv_bytes, begin);
    if (out > 0) std::memcpy(outgoing_.data(), send + begin, out);
    write_to(to, out);
    read_from(from);
    if (in > 0) std::memcpy(recv + begin, incoming_[static_cast<size_t>(from)].data(), in);
  }
}

void GlooSyncCollectives::write_to(int peer, size_t bytes) {
  send_message(*send_[static_cast<size_t>(peer)], bytes, members_[static_cast<size_t>(peer)]);
}

void GlooSyncCollectives::read_from(int peer) {
  wait_for_message(*recv_[static_cast<size_t>(peer)], members_[static_cast<size_t>(peer)]);
}

// At step s (0..n-2) rank r sends its running sum of block (r-s-1) mod n to the right and adds
// the left's sum of block (r-s-2) mod n into its own; after n-1 steps it holds the full sum
// of block r, added in ring order from rank r+1: ((x_{r+1} + x_{r+2}) + ...) + x_r.
void GlooSyncCollectives::ring_reduce_scatter(char* work, size_t count, size_t block, ElementType type) {
  const size_t element = element_size(type);
  const int n = context_->size;
  received_.resize(block * element);
  for (int s = 0; s + 1 < n; ++s) {
    const ByteRange out = block_bytes(peer_rank(-s - 1), count, block, element);
    const ByteRange in = block_bytes(peer_rank(-s - 2), count, block, element);
    shift(peer_rank(1), work + out.begin, out.size, peer_rank(-1), received_.data(), in.size, block * element);
    add_into(work + in.begin, received_.data(), in.size / element, type);
  }
}

// At step s (0..n-2) rank r sends block (r-s) mod n, which it holds in full, to the right and
// receives block (r-s-1) mod n from the left.
void GlooSyncCollectives::ring_all_gather(char* work, size_t count, size_t block, ElementType type) {
  const size_t element = element_size(type);
  const int n = context_->size;
  for (int s = 0; s + 1 < n; ++s) {
    const ByteRange out = block_bytes(peer_rank(-s), count, block, element);
    const ByteRange in = block_bytes(peer_rank(-s - 1), count, block, element);
    shift(peer_rank(1), work + out.begin, out.size, peer_rank(-1), work + in.begin, in.size, block * element);
  }
}

void GlooSyncCollectives::all_reduce(void* buf, size_t count, ElementType type) {
  if (count * element_size(type) <= message_bytes_) return all_reduce_in_one_message(buf, count, type);
  const auto n = static_cast<size_t>(context_->size);
  const size_t block = (count + n - 1) / n;
  ring_reduce_scatter(static_cast<char*>(buf), count, block, type);
  ring_all_gather(static_cast<char*>(buf), count, block, type);
}

void GlooSyncCollectives::all_reduce_in_one_message(void* buf, size_t count, ElementType type) {
  const size_t bytes = count * element_size(type);
  std::memcpy(outgoing_.data(), buf, bytes);
  exchange_with_all(bytes);
  // Rank r's contribution: this rank's own buffer, or what r sent.
  auto part = [&](int r) -> const void* {
    return r == context_->rank ? outgoing_.data() : incoming_[static_cast<size_t>(r)].data();
  };
  if (type == ElementType::float32) {
    // In the ring reduce-scatter's order (ring_reduce_scatter above), the bits of the ring.
    auto* out = static_cast<float*>(buf);
    const int n = context_->size;
    const size_t block = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
    for (int b = 0; b < n; ++b) {
      const ByteRange elements = block_bytes(b, count, block, 1);
      const size_t begin = elements.begin, end = elements.begin + elements.size;
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

void GlooSyncCollectives::reduce_scatter(const void* in, void* out, size_t count, ElementType type) {
  if (count == 0) return;  // the same count on every rank: nothing to send anywhere
  const size_t block_size = count * element_size(type);
  const auto n = static_cast<size_t>(context_->size);
  const auto rank = static_cast<size_t>(context_->rank);
  char* work = static_cast<char*>(out) - block_size * rank;
  const bool in_place = work == static_cast<const char*>(in);
  if (!in_place) {
    work_.assign(static_cast<const char*>(in), static_cast<const char*>(in) + block_size * n);
    work = work_.data();
  }
  ring_reduce_scatter(work, count * n, count, type);
  if (!in_place) std::memcpy(out, work + block_size * rank, block_size);
}

void GlooSyncCollectives::all_gather(const void* in, void* out, size_t count, ElementType type) {
  if (count == 0) return;
  const size_t block_size = count * element_size(type);
  char* mine = static_cast<char*>(out) + block_size * static_cast<size_t>(context_->rank);
  if (mine != static_cast<const char*>(in)) std::memcpy(mine, in, block_size);
  ring_all_gather(static_cast<char*>(out), count * static_cast<size_t>(context_->size), count, type);
}

// n-1 shifts: at step s (1..n-1) rank r sends its block for rank r+s and receives rank r-s's
// block for it.
void GlooSyncCollectives::all_to_all(const void* in, void* out, size_t count, ElementType type) {
  if (count == 0) return;
  const size_t block_size = count * element_size(type);
  const auto at = [&](auto* base, int r) { return base + block_size * static_cast<size_t>(r); };
  const auto* from_me = static_cast<const char*>(in);
  auto* to_me = static_cast<char*>(out);
  std::memcpy(at(to_me, context_->rank), at(from_me, context_->rank), block_size);
  for (int s = 1; s < context_->size; ++s) {
    const int right = peer_rank(s), left = peer_rank(-s);
    shift(right, at(from_me, right), block_size, left, at(to_me, left), block_size, block_size);
  }
}

void GlooSyncCollectives::barrier() { exchange_with_all(0); }

}  // namespace axonn
