// Collectives of the Gloo communicator, checked exactly. Ranks are threads of this
// process that bootstrap through an in-memory Exchange (the same protocol as PMIx:
// put, fence, get); the multi-process tests run the same checks under the launcher.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <random>

#include "comm/bfloat16.hpp"
#include "comm/comm_grid.hpp"
#include "comm/cuda_device.hpp"
#include "comm/exchange_blob.hpp"
#include "comm/gloo_communicator.hpp"
#include "comm/gloo_mesh.hpp"
#include "comm/gloo_sync.hpp"
#include "comm/single_rank_communicator.hpp"
#include "random_floats.hpp"
#include "thread_exchange.hpp"
#if AXONN_HAVE_CUDA
#include "comm/cuda_check.hpp"
#endif

namespace axonn {
namespace {

using test::run_ranks;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kTimeout = std::chrono::milliseconds(10000);

// Connects `groups` (the calling rank's) and wraps each in a GlooCommunicator. With
// `small_path` (as CommGrid does) each group is connected twice, the second context for
// the sync pairs (gloo_sync.hpp); without, every collective is Gloo's own.
std::vector<std::unique_ptr<GlooCommunicator>> connect(Exchange& exchange, const std::vector<GroupSpec>& groups,
                                                       GlooCommunicator::Recorder recorder = nullptr,
                                                       bool small_path = true,
                                                       std::chrono::milliseconds timeout = kTimeout) {
  std::vector<GroupSpec> specs = groups;
  if (small_path)
    for (const auto& g : groups) specs.push_back({g.name + "+sync", g.members});
  auto contexts =
      connect_gloo_groups(exchange, make_gloo_device(true), specs, timeout, small_path ? "test" : "test-ring");
  std::vector<std::unique_ptr<GlooCommunicator>> comms;
  for (size_t g = 0; g < groups.size(); ++g)
    comms.push_back(std::make_unique<GlooCommunicator>(groups[g], contexts[g], timeout, recorder,
                                                       small_path ? contexts[groups.size() + g] : nullptr));
  return comms;
}

TEST(ExchangeBlob, PacksAndUnpacksPairs) {
  BlobPairs pairs{{"a", {'1', '2'}}, {"", {}}, {"key", {'\0', 'x'}}};
  EXPECT_EQ(unpack_pairs(pack_pairs(pairs)), pairs);
  EXPECT_THROW(unpack_pairs({'\x05', '\0'}), CommError);
}

// Every collective on 4 ranks, with and without the sync pairs (every collective but the
// broadcast takes them when they are there).
void check_four_rank_collectives(bool small_path) {
  const int world = 4;
  run_ranks(world, [&](int rank, Exchange& exchange) {
    std::vector<CollectiveRecord> records;
    auto comms = connect(
        exchange, {{"world", {0, 1, 2, 3}}}, [&](const CollectiveRecord& r) { records.push_back(r); }, small_path);
    GlooCommunicator& comm = *comms[0];
    ASSERT_EQ(comm.rank(), rank);

    // all-reduce: element i of rank r is r*100 + i; the sum is exact in float32.
    std::vector<float> buf(1000);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(rank * 100 + static_cast<int>(i));
    comm.all_reduce(buf.data(), buf.size(), ElementType::float32);
    for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], static_cast<float>(600 + 4 * static_cast<int>(i)));

    // all-gather: block r holds rank r's values.
    std::vector<float> mine(3, static_cast<float>(rank + 1)), all(12, -1.0f);
    comm.all_gather(mine.data(), all.data(), 3, ElementType::float32);
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < 3; ++i) ASSERT_EQ(all[static_cast<size_t>(r * 3 + i)], static_cast<float>(r + 1));

    // reduce-scatter: input element j of rank r is r + j; rank r gets block r of the sum.
    std::vector<float> in(8), out(2, -1.0f);
    for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>(rank + static_cast<int>(j));
    comm.reduce_scatter(in.data(), out.data(), 2, ElementType::float32);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], static_cast<float>(6 + 4 * (2 * rank + i)));

    // broadcast from rank 2.
    std::vector<float> b(5, static_cast<float>(rank));
    comm.broadcast(b.data(), b.size(), 2, ElementType::float32);
    for (float v : b) ASSERT_EQ(v, 2.0f);
    comm.barrier();

    // Each call recorded with its nccl-tests size in bytes.
    ASSERT_EQ(records.size(), 5u);
    EXPECT_EQ(records[0].kind, CollectiveKind::all_reduce);
    EXPECT_EQ(records[0].bytes, 4000u);
    EXPECT_EQ(records[1].bytes, 48u);  // gathered output
    EXPECT_EQ(records[2].bytes, 32u);  // reduce-scatter input
    EXPECT_EQ(records[3].bytes, 20u);
    EXPECT_EQ(records[4].bytes, 0u);
  });
}

TEST(GlooCommunicator, CollectivesOnFourRanksAreExact) { check_four_rank_collectives(true); }
TEST(GlooCommunicator, CollectivesOnFourRanksAreExactOnTheRingAlone) { check_four_rank_collectives(false); }

// Sizes on both sides of the one-message all-reduce's limit, interleaved on one communicator
// (the one message and the ring in pieces), with sums that are exact in float32.
TEST(GlooCommunicator, LatencyPathAndRingGiveTheSameExactSums) {
  const size_t limit_floats = gloo_small_message_bytes() / 4;
  ASSERT_GT(limit_floats, 0u) << "AXONN_GLOO_SMALL_BYTES=0 turns the latency path off";
  run_ranks(4, [&](int rank, Exchange& exchange) {
    auto comms = connect(exchange, {{"world", {0, 1, 2, 3}}});
    for (size_t count : {size_t{1}, size_t{1000}, limit_floats, limit_floats + 1, size_t{3}}) {
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 1000 + 1));
      comms[0]->all_reduce(buf.data(), count, ElementType::float32);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(buf[i], static_cast<float>(10 * static_cast<int>(i % 1000 + 1))) << count;
    }
    std::vector<uint16_t> bf(64, float_to_bf16(0.5f * static_cast<float>(rank + 1)));
    comms[0]->all_reduce(bf.data(), bf.size(), ElementType::bfloat16);
    for (uint16_t v : bf) ASSERT_EQ(bf16_to_float(v), 5.0f);
    comms[0]->barrier();
  });
}

// Sizes above the one-message limit (AXONN_GLOO_SMALL_BYTES) and several ring pieces
// (kRingPieceBytes), so every collective moves in several pieces, with counts that leave the
// all-reduce's last blocks short or empty, in place and not, on rings of 2, 3 and 5: every
// result exact (integer sums in float32).
TEST(GlooCommunicator, CollectivesLargerThanAPieceAreExact) {
  ASSERT_GT(gloo_small_message_bytes(), 0u) << "AXONN_GLOO_SMALL_BYTES=0 turns the sync pairs off";
  const size_t piece_floats = std::max(gloo_small_message_bytes(), kRingPieceBytes) / 4;
  for (int n : {2, 3, 5}) {
    std::vector<int> members(static_cast<size_t>(n));
    std::iota(members.begin(), members.end(), 0);
    run_ranks(n, [&](int rank, Exchange& exchange) {
      auto comms = connect(exchange, {{"world", members}});
      GlooCommunicator& comm = *comms[0];
      const auto value = [](int r, size_t i) { return static_cast<float>(r * 1000 + static_cast<int>(i % 997)); };
      const auto sum = [&](size_t i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += value(r, i);
        return s;
      };
      // 2 pieces and a bit, and fewer elements than ranks past the last full block.
      for (size_t count : {2 * piece_floats + 1, 3 * piece_floats + static_cast<size_t>(n) - 1}) {
        ASSERT_TRUE(comm.on_sync_pairs(CollectiveKind::all_reduce, count * 4)) << count;
        std::vector<float> buf(count);
        for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
        comm.all_reduce(buf.data(), count, ElementType::float32);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], sum(i)) << n << " ranks, " << count << " floats, " << i;
      }
      const size_t block = piece_floats + 3;  // per rank: two pieces, the second short
      const auto total = block * static_cast<size_t>(n);
      for (CollectiveKind kind :
           {CollectiveKind::reduce_scatter, CollectiveKind::all_gather, CollectiveKind::all_to_all})
        ASSERT_TRUE(comm.on_sync_pairs(kind, total * 4)) << collective_name(kind);
      std::vector<float> in(total), out(block), gathered(total), exchanged(total);
      for (size_t i = 0; i < total; ++i) in[i] = value(rank, i);
      comm.reduce_scatter(in.data(), out.data(), block, ElementType::float32);
      for (size_t i = 0; i < block; ++i) ASSERT_EQ(out[i], sum(block * static_cast<size_t>(rank) + i)) << i;
      std::vector<float> in_place = in;
      float* mine = in_place.data() + block * static_cast<size_t>(rank);
      comm.reduce_scatter(in_place.data(), mine, block, ElementType::float32);
      ASSERT_TRUE(std::equal(out.begin(), out.end(), mine));
      comm.all_gather(out.data(), gathered.data(), block, ElementType::float32);
      comm.all_gather(mine, in_place.data(), block, ElementType::float32);
      for (size_t i = 0; i < total; ++i) ASSERT_EQ(gathered[i], sum(i)) << i;
      ASSERT_EQ(in_place, gathered);
      comm.all_to_all(in.data(), exchanged.data(), block, ElementType::float32);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < block; ++i)
          ASSERT_EQ(exchanged[block * static_cast<size_t>(r) + i], value(r, block * static_cast<size_t>(rank) + i));
    });
  }
}

// What calibrate fits apart (Communicator::small_path_bytes) is where the sync pairs stop
// taking a kind: the largest size they take, one byte more goes through Gloo's own ring.
TEST(GlooCommunicator, TheSmallPathIsWhatTheSyncPairsTake) {
  ASSERT_EQ(gloo_small_message_bytes(), size_t{64} << 10) << "the sizes below assume the default 64 KiB";
  for (int n : {2, 4}) {
    std::vector<int> members(static_cast<size_t>(n));
    std::iota(members.begin(), members.end(), 0);
    run_ranks(n, [&](int, Exchange& exchange) {
      auto comms = connect(exchange, {{"world", members}});
      const GlooCommunicator& comm = *comms[0];
      for (CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::all_gather,
                                  CollectiveKind::reduce_scatter, CollectiveKind::all_to_all}) {
        const size_t largest = comm.small_path_bytes(kind);
        ASSERT_TRUE(comm.on_sync_pairs(kind, largest)) << collective_name(kind) << " on " << n;
        ASSERT_FALSE(comm.on_sync_pairs(kind, largest + 1)) << collective_name(kind) << " on " << n;
      }
      // 64 exchanges of 16 KiB pieces: 2(n-1) ring steps for an all-reduce, n-1 for the others.
      ASSERT_EQ(comm.small_path_bytes(CollectiveKind::all_reduce), n == 2 ? size_t{1} << 20 : size_t{640} << 10);
      ASSERT_EQ(comm.small_path_bytes(CollectiveKind::all_gather), n == 2 ? size_t{2} << 20 : size_t{21 * 64} << 10);
    });
  }
}

// The send buffers of this process's connected TCP sockets (SO_SNDBUF as getsockopt reads it:
// the kernel's doubled figure), from /proc/self/fd.
std::vector<int> tcp_send_buffers() {
  std::vector<int> sizes;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    int type = 0, size = 0;
    socklen_t len = sizeof type;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) continue;
    len = sizeof size;
    if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &len) == 0) sizes.push_back(size);
  }
  return sizes;
}

// Gloo sizes a socket's send buffer by the largest message sent on it so far, and where both
// ranks of a pair write at once (the one-message all-reduce) a write that does not fit beside
// the previous, unacknowledged message waits for the peer's delayed ACK, 40 ms. So from the
// first collective on, each sync pair's socket holds two messages of the largest size: here,
// after an all-reduce of one float, both ends of a pair of two ranks (threads of this
// process) are sized for twice message_bytes, which the kernel doubles (without the
// sizing message, 2 x (Gloo's 48-byte header + 4 bytes), at least the kernel's minimum 4608).
TEST(GlooSyncCollectives, PairsHoldTwoOfTheLargestMessagesFromTheFirstCall) {
  const size_t largest = gloo_small_message_bytes();
  ASSERT_GT(largest, 0u) << "AXONN_GLOO_SMALL_BYTES=0 turns the sync pairs off";
  std::mutex mutex;
  std::vector<std::unique_ptr<GlooSyncCollectives>> kept;
  run_ranks(2, [&](int, Exchange& exchange) {
    // The only connection of this process: the sync pair of two ranks.
    auto contexts = connect_gloo_groups(exchange, make_gloo_device(true), {{"sync", {0, 1}}}, kTimeout, "test");
    auto sync = std::make_unique<GlooSyncCollectives>(std::vector<int>{0, 1}, contexts[0], largest);
    float one = 1.0f;
    sync->all_reduce(&one, 1, ElementType::float32);
    ASSERT_EQ(one, 2.0f);
    // Both ranks' sockets stay open until both have been looked at.
    std::lock_guard<std::mutex> lock(mutex);
    kept.push_back(std::move(sync));
  });
  const std::vector<int> sizes = tcp_send_buffers();
  ASSERT_EQ(sizes.size(), 2u) << "connected TCP sockets: both ends of the pair";
  for (int size : sizes) EXPECT_GE(static_cast<size_t>(size), 4 * largest) << "SO_SNDBUF of an end of the pair";
}

// The optimizer sharded over data (gradient_sync.hpp) replaces each gradient all-reduce by an
// in-place reduce-scatter of the buffer padded to n equal blocks and, after the update, an
// in-place all-gather. On the sync pairs (gloo_sync.hpp) an all-reduce adds each element in
// the ring reduce-scatter's order, so the two give the same bits. Gloo's own ring all-reduce
// (the sync pairs off, or a call too large for them) adds chunk j from rank j-1 down: the
// same for n = 2 (one addition commutes) but not beyond, where the two sums of the same n
// terms differ by at most 2*gamma(n-1)*sum|x_r| (gamma(k) = k*u/(1-k*u), u = 2^-24: the
// classic bound for each, twice).
TEST(GlooCommunicator, ReduceScatterAndAllGatherGiveTheAllReducesBitsWhereTheOrdersAgree) {
  const size_t limit_floats = gloo_small_message_bytes() / 4;
  ASSERT_GT(limit_floats, 0u) << "AXONN_GLOO_SMALL_BYTES=0 turns the sync pairs off";
  for (const bool sync_pairs : {true, false}) {
    for (int n : {2, 3, 4}) {
      std::vector<int> members(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) members[static_cast<size_t>(r)] = r;
      run_ranks(n, [&](int rank, Exchange& exchange) {
        auto comms = connect(exchange, {{"data", members}}, nullptr, sync_pairs);
        GlooCommunicator& comm = *comms[0];
        for (size_t count : {size_t{1003}, limit_floats, limit_floats + 7, 3 * limit_floats + 1, size_t{300000}}) {
          // Every rank's values, known to every rank: magnitudes spread so the order matters.
          std::vector<std::vector<float>> x;
          for (int r = 0; r < n; ++r) {
            std::mt19937 rng(static_cast<uint32_t>(count * 31 + static_cast<size_t>(r)));
            std::vector<float> v = test::random_floats(rng, static_cast<int64_t>(count));
            for (size_t i = 0; i < count; ++i) v[i] *= std::ldexp(1.0f, static_cast<int>(i % 23) - 11);
            x.push_back(std::move(v));
          }
          std::vector<float> reduced = x[static_cast<size_t>(rank)];
          comm.all_reduce(reduced.data(), count, ElementType::float32);
          const size_t block = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
          std::vector<float> sharded(block * static_cast<size_t>(n), 0.0f);
          std::copy(x[static_cast<size_t>(rank)].begin(), x[static_cast<size_t>(rank)].end(), sharded.begin());
          float* mine = sharded.data() + block * static_cast<size_t>(rank);
          comm.reduce_scatter(sharded.data(), mine, block, ElementType::float32);
          comm.all_gather(mine, sharded.data(), block, ElementType::float32);
          const bool same_order = comm.on_sync_pairs(CollectiveKind::all_reduce, count * 4) || n == 2;
          size_t differing = 0;
          for (size_t i = 0; i < count; ++i) {
            if (same_order) {
              ASSERT_EQ(std::bit_cast<uint32_t>(sharded[i]), std::bit_cast<uint32_t>(reduced[i]))
                  << n << " ranks, " << count << " floats, element " << i << (sync_pairs ? "" : ", Gloo's ring");
              continue;
            }
            double magnitude = 0;
            for (int r = 0; r < n; ++r) magnitude += std::fabs(x[static_cast<size_t>(r)][i]);
            const double u = std::ldexp(1.0, -24), gamma = (n - 1) * u / (1 - (n - 1) * u);
            ASSERT_LE(std::fabs(double{sharded[i]} - reduced[i]), 2 * gamma * magnitude)
                << n << " ranks, " << count << " floats, element " << i;
            differing += sharded[i] != reduced[i];
          }
          if (!same_order && rank == 0)
            std::printf(
                "[ measured ] %d ranks, %zu floats (Gloo's ring all-reduce%s): %zu elements differ in the last bits\n",
                n, count, sync_pairs ? ", too large for the sync pairs" : "", differing);
        }
      });
    }
  }
}

// A rank that never joins: the others' blocking reads on the sync pairs give up after the
// timeout, and the error names the group, the collective, its size and the missing rank.
// Rank 2 stays silent until both have given up, so their all_reduce can only end by giving
// up; a read that waited without a limit would hang until ctest's TIMEOUT.
TEST(GlooCommunicator, LatencyPathTimesOutOnAStalledPeer) {
  std::atomic<int> gave_up{0};
  run_ranks(3, [&](int rank, Exchange& exchange) {
    auto comms = connect(exchange, {{"world", {0, 1, 2}}}, nullptr, true, std::chrono::milliseconds(500));
    float v = 1.0f;
    comms[0]->all_reduce(&v, 1, ElementType::float32);  // all three: the pairs are in sync mode
    ASSERT_EQ(v, 3.0f);
    if (rank == 2) {  // stays connected but silent until the others have given up
      while (gave_up < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    try {
      comms[0]->all_reduce(&v, 1, ElementType::float32);
      ADD_FAILURE() << "all_reduce returned without rank 2";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("all_reduce on axis 'world' (world ranks 0,1,2, 4 bytes) timed out after 500 ms: "
                                      "a peer did not arrive (waiting for world rank 2: "));
    }
    ++gave_up;
  });
}

TEST(GlooCommunicator, BFloat16AllReduceSumsInFloat) {
  run_ranks(2, [&](int rank, Exchange& exchange) {
    auto comms = connect(exchange, {{"world", {0, 1}}});
    GlooCommunicator& comm = *comms[0];
    // 1.5 and 2.25 are exact in bfloat16, so is their sum 3.75.
    std::vector<uint16_t> buf(64, float_to_bf16(rank == 0 ? 1.5f : 2.25f));
    comm.all_reduce(buf.data(), buf.size(), ElementType::bfloat16);
    for (uint16_t v : buf) ASSERT_EQ(bf16_to_float(v), 3.75f);
    std::vector<uint16_t> in(4, float_to_bf16(static_cast<float>(rank + 1))), out(2);
    comm.reduce_scatter(in.data(), out.data(), 2, ElementType::bfloat16);
    for (uint16_t v : out) ASSERT_EQ(bf16_to_float(v), 3.0f);
  });
}

// Started collectives run on the communicator's thread while the caller goes on; they and
// the blocking calls after them keep their call order (a blocking call first lets the
// started ones end), finish(t) finishes everything up to t, and each one is recorded once.
TEST(GlooCommunicator, StartedCollectivesOverlapTheCallerAndKeepTheirOrder) {
  run_ranks(3, [&](int rank, Exchange& exchange) {
    std::mutex mu;
    std::vector<CollectiveKind> recorded;
    auto comms = connect(exchange, {{"world", {0, 1, 2}}}, [&](const CollectiveRecord& r) {
      std::lock_guard lock(mu);
      recorded.push_back(r.kind);
    });
    GlooCommunicator& comm = *comms[0];
    const size_t n = 100'000;  // the ring path
    std::vector<float> big(n, static_cast<float>(rank + 1)), mine(4, static_cast<float>(10 * rank)), all(12, -1.0f);
    const auto reduce = comm.start_all_reduce(big.data(), n, ElementType::float32);
    const auto gather = comm.start_all_gather(mine.data(), all.data(), 4, ElementType::float32);
    EXPECT_GT(gather, reduce);
    std::vector<float> blocks(6), block(2, -1.0f);  // rank r's block b holds 100 b + r
    for (size_t b = 0; b < 3; ++b)
      for (size_t i = 0; i < 2; ++i) blocks[b * 2 + i] = static_cast<float>(100 * b + static_cast<size_t>(rank));
    const auto scatter = comm.start_reduce_scatter(blocks.data(), block.data(), 2, ElementType::float32);
    EXPECT_GT(scatter, gather);
    float small = 1.0f;
    comm.all_reduce(&small, 1, ElementType::float32);  // after both started ones
    EXPECT_EQ(small, 3.0f);
    for (size_t r = 0; r < 3; ++r)
      for (size_t i = 0; i < 4; ++i) ASSERT_EQ(all[r * 4 + i], static_cast<float>(10 * r));
    for (float v : big) ASSERT_EQ(v, 6.0f);
    for (float v : block) ASSERT_EQ(v, static_cast<float>(300 * rank + 3));  // 3·100·rank + (0 + 1 + 2)
    comm.finish(gather);  // already done: returns at once

    std::vector<float> more(n, 2.0f);
    const auto t = comm.start_all_reduce(more.data(), n, ElementType::float32);
    comm.finish(t);
    for (float v : more) ASSERT_EQ(v, 6.0f);
    std::lock_guard lock(mu);
    EXPECT_EQ(recorded,
              (std::vector<CollectiveKind>{CollectiveKind::all_reduce, CollectiveKind::all_gather,
                                           CollectiveKind::reduce_scatter, CollectiveKind::all_reduce,
                                           CollectiveKind::all_reduce}));
  });
}

// All-to-all values, exact in bfloat16 too (integers below 256): element i of the block
// that group rank `from` sends to group rank `to`.
float block_value(int from, int to, size_t i) { return static_cast<float>(64 * from + 8 * to + static_cast<int>(i)); }

// Uneven counts with empty blocks: what `from` sends `to` (0 to 2 elements), and the last
// rank sends nothing at all (so the first receives nothing on 2 ranks).
size_t uneven_count(int from, int to, int n) { return from == n - 1 ? 0 : static_cast<size_t>((from + 2 * to) % 3); }

// Host buffers of either element type, written and read as floats.
struct TypedBuffer {
  ElementType type;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  TypedBuffer(ElementType t, size_t count) : type(t) {
    if (t == ElementType::float32)
      f32.resize(count);
    else
      bf16.resize(count);
  }
  void* data() { return type == ElementType::float32 ? static_cast<void*>(f32.data()) : bf16.data(); }
  size_t size() const { return type == ElementType::float32 ? f32.size() : bf16.size(); }
  void set(size_t i, float v) {
    if (type == ElementType::float32)
      f32[i] = v;
    else
      bf16[i] = float_to_bf16(v);
  }
  float get(size_t i) const { return type == ElementType::float32 ? f32[i] : bf16_to_float(bf16[i]); }
};

// This rank's all_to_allv send buffer for uneven_count, and the counts both ways.
struct UnevenExchange {
  std::vector<size_t> send_counts, recv_counts;
  TypedBuffer in, out;
  UnevenExchange(int me, int n, ElementType type) : in(type, 0), out(type, 0) {
    for (int j = 0; j < n; ++j) {
      send_counts.push_back(uneven_count(me, j, n));
      recv_counts.push_back(uneven_count(j, me, n));
    }
    in = TypedBuffer(type, std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}));
    out = TypedBuffer(type, std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}));
    size_t at = 0;
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < send_counts[static_cast<size_t>(j)]; ++i) in.set(at++, block_value(me, j, i));
    for (size_t i = 0; i < out.size(); ++i) out.set(i, -1.0f);
  }
  size_t sent_bytes() const { return in.size() * element_size(in.type); }
  // Block j of `out` holds what rank j sent this rank, in group-rank order.
  void expect_received(int me, int n) const {
    size_t at = 0;
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < recv_counts[static_cast<size_t>(j)]; ++i)
        ASSERT_EQ(out.get(at++), block_value(j, me, i)) << "from rank " << j << " element " << i;
    ASSERT_EQ(at, out.size());
  }
};

// all_to_all's buffers: `count` elements per block, block j of `in` for rank j.
void fill_blocks(TypedBuffer& in, int me, int n, size_t count) {
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i) in.set(static_cast<size_t>(j) * count + i, block_value(me, j, i));
}
void expect_blocks(const TypedBuffer& out, int me, int n, size_t count) {
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(out.get(static_cast<size_t>(j) * count + i), block_value(j, me, i)) << "from rank " << j;
}

std::vector<int> first_ranks(int n) {
  std::vector<int> members(static_cast<size_t>(n));
  std::iota(members.begin(), members.end(), 0);
  return members;
}

// Every block reaches its rank on groups of 2, 3 and 4, in both element types, with equal
// and with uneven counts (empty blocks, a rank that sends nothing), each recorded as an
// all_to_all of the bytes this rank sends, its own block included.
TEST(GlooCommunicator, AllToAllAndAllToAllvMoveEveryBlockToItsRank) {
  for (int n : {2, 3, 4}) {
    run_ranks(n, [&](int rank, Exchange& exchange) {
      std::vector<CollectiveRecord> records;
      auto comms =
          connect(exchange, {{"expert", first_ranks(n)}}, [&](const CollectiveRecord& r) { records.push_back(r); });
      GlooCommunicator& comm = *comms[0];
      std::vector<size_t> want_bytes;
      for (ElementType type : {ElementType::float32, ElementType::bfloat16}) {
        SCOPED_TRACE(std::to_string(n) + " ranks, " + element_type_name(type));
        for (size_t count : {size_t{3}, size_t{0}}) {
          TypedBuffer in(type, count * static_cast<size_t>(n)), out(type, count * static_cast<size_t>(n));
          fill_blocks(in, rank, n, count);
          comm.all_to_all(in.data(), out.data(), count, type);
          expect_blocks(out, rank, n, count);
          want_bytes.push_back(count * static_cast<size_t>(n) * element_size(type));
        }
        UnevenExchange uneven(rank, n, type);
        comm.all_to_allv(uneven.in.data(), uneven.send_counts, uneven.out.data(), uneven.recv_counts, type);
        uneven.expect_received(rank, n);
        want_bytes.push_back(uneven.sent_bytes());
      }
      ASSERT_EQ(records.size(), want_bytes.size());
      for (size_t i = 0; i < records.size(); ++i) {
        EXPECT_EQ(records[i].kind, CollectiveKind::all_to_all) << i;
        EXPECT_EQ(records[i].bytes, want_bytes[i]) << i;
      }
    });
  }
}

// Started all-to-alls keep their order with the all-reduces around them, on the
// communicator's thread; the started all_to_allv works on its own copies of the counts
// (the caller's are gone before it runs).
TEST(GlooCommunicator, StartedAllToAllsInterleaveWithAllReduces) {
  const int n = 3;
  run_ranks(n, [&](int rank, Exchange& exchange) {
    std::mutex mu;
    std::vector<CollectiveKind> recorded;
    auto comms = connect(exchange, {{"expert", first_ranks(n)}}, [&](const CollectiveRecord& r) {
      std::lock_guard lock(mu);
      recorded.push_back(r.kind);
    });
    GlooCommunicator& comm = *comms[0];
    std::vector<float> big(100'000, static_cast<float>(rank + 1));  // the ring path
    const auto reduce = comm.start_all_reduce(big.data(), big.size(), ElementType::float32);
    UnevenExchange uneven(rank, n, ElementType::bfloat16);
    Communicator::Ticket uneven_ticket = 0;
    {
      const std::vector<size_t> send = uneven.send_counts, receive = uneven.recv_counts;
      uneven_ticket = comm.start_all_to_allv(uneven.in.data(), send, uneven.out.data(), receive, ElementType::bfloat16);
    }
    const size_t count = 2000;
    TypedBuffer in(ElementType::float32, count * n), out(ElementType::float32, count * n);  // float32: exact to 2^24
    fill_blocks(in, rank, n, count);
    const auto blocks = comm.start_all_to_all(in.data(), out.data(), count, ElementType::float32);
    EXPECT_LT(reduce, uneven_ticket);
    EXPECT_LT(uneven_ticket, blocks);
    std::vector<float> more(64, 1.0f);
    const auto second_reduce = comm.start_all_reduce(more.data(), more.size(), ElementType::float32);
    comm.finish(second_reduce);
    for (float v : big) ASSERT_EQ(v, 6.0f);
    for (float v : more) ASSERT_EQ(v, 3.0f);
    uneven.expect_received(rank, n);
    expect_blocks(out, rank, n, count);
    std::lock_guard lock(mu);
    EXPECT_EQ(recorded, (std::vector<CollectiveKind>{CollectiveKind::all_reduce, CollectiveKind::all_to_all,
                                                     CollectiveKind::all_to_all, CollectiveKind::all_reduce}));
  });
}

// An all-to-all whose peer never comes times out like the other collectives, naming the
// group, the collective, its bytes and the ranks.
TEST(GlooCommunicator, AllToAllTimesOutNamingTheGroupAndTheCollective) {
  std::atomic<int> gave_up{0};
  run_ranks(2, [&](int rank, Exchange& exchange) {
    auto comms = connect(exchange, {{"expert", {0, 1}}}, nullptr, false, std::chrono::milliseconds(300));
    if (rank == 1) {
      while (gave_up < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    std::vector<float> in(4, 1.0f), out(4);
    try {
      comms[0]->all_to_all(in.data(), out.data(), 2, ElementType::float32);
      ADD_FAILURE() << "all_to_all returned without rank 1";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(),
                  HasSubstr("all_to_all on axis 'expert' (world ranks 0,1, 16 bytes) timed out after 300 ms"));
    }
    ++gave_up;
  });
}

// A started collective that times out: finish rethrows its CommError, naming the group and
// the collective, and so does every later call (the group is out of step for good).
TEST(GlooCommunicator, StartedCollectiveTimeoutSurfacesAtFinish) {
  std::atomic<int> gave_up{0};
  run_ranks(2, [&](int rank, Exchange& exchange) {
    auto comms = connect(exchange, {{"pair", {0, 1}}}, nullptr, false, std::chrono::milliseconds(300));
    GlooCommunicator& comm = *comms[0];
    if (rank == 1) {
      while (gave_up < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    std::vector<float> buf(1000, 1.0f);
    const auto t = comm.start_all_reduce(buf.data(), buf.size(), ElementType::float32);
    try {
      comm.finish(t);
      ADD_FAILURE() << "finish returned without rank 1";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(),
                  HasSubstr("all_reduce on axis 'pair' (world ranks 0,1, 4000 bytes) timed out after 300 ms"));
    }
    float v = 1.0f;
    EXPECT_THROW(comm.all_reduce(&v, 1, ElementType::float32), CommError);
    ++gave_up;
  });
}

TEST(GlooCommunicator, SubgroupsOfAGridAreIndependent) {
  // World 4 as a 2x2 grid: "row" groups {0,1},{2,3} and "col" groups {0,2},{1,3}; ranks
  // list their groups in different orders, which one bootstrap fence must not mind.
  run_ranks(4, [&](int rank, Exchange& exchange) {
    const GroupSpec row{"row", rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}};
    const GroupSpec col{"col", rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}};
    auto comms = rank == 3 ? connect(exchange, {col, row}) : connect(exchange, {row, col});
    GlooCommunicator& rows = rank == 3 ? *comms[1] : *comms[0];
    GlooCommunicator& cols = rank == 3 ? *comms[0] : *comms[1];
    float v = static_cast<float>(1 << rank);
    rows.all_reduce(&v, 1, ElementType::float32);
    EXPECT_EQ(v, rank < 2 ? 3.0f : 12.0f);
    float w = static_cast<float>(1 << rank);
    cols.all_reduce(&w, 1, ElementType::float32);
    EXPECT_EQ(w, rank % 2 == 0 ? 5.0f : 10.0f);
  });
}

// In a grid, a failed collective asks its members' rank watches who did not arrive
// (rank_watch.hpp). Rank 2 of three stays in no collective: the others time out naming it,
// and say what it is doing; the first to give up tells the other, which leads with that.
TEST(CommGridWatch, ATimeoutNamesTheRankThatDidNotArriveAndWhatItDoes) {
  std::atomic<int> gave_up{0};
  std::mutex mu;
  std::vector<std::string> messages;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  run_ranks(3, [&](int rank, Exchange& exchange) {
    CommGrid grid(exchange, parse_layout("3x1x1x1"), std::chrono::milliseconds(800), true);
    float v = 1.0f;
    grid.world().all_reduce(&v, 1, ElementType::float32);
    ASSERT_EQ(v, 3.0f);
    if (rank == 2) {  // alive, answering its watch, but never comes to the next collective
      while (gave_up < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    try {
      grid.world().all_reduce(&v, 1, ElementType::float32);
      ADD_FAILURE() << "all_reduce returned without rank 2";
    } catch (const CommError& e) {
      std::lock_guard lock(mu);
      messages.push_back(e.what());
    }
    ++gave_up;
  });
  ASSERT_EQ(messages.size(), 2u);
  const std::string names = "world rank 2 on host " + std::string(host) + " (pid " + std::to_string(getpid()) +
                            ") did not arrive: it runs but is in no collective (for ";
  for (const std::string& m : messages) {
    EXPECT_THAT(m, StartsWith("all_reduce on axis 'world' (world ranks 0,1,2, 4 bytes) timed out after 800 ms: "));
    EXPECT_THAT(m, HasSubstr(names));
  }
}

// A collective whose peer is gone fails at once and says "failed", not "timed out" (which it
// says once the 10 s timeout has passed), naming the peer that is gone.
TEST(CommGridWatch, APeerThatIsGoneFailsAtOnceSayingSo) {
  run_ranks(2, [&](int rank, Exchange& exchange) {
    auto grid = std::make_unique<CommGrid>(exchange, parse_layout("2x1x1x1"), kTimeout, true);
    float v = 1.0f;
    grid->world().all_reduce(&v, 1, ElementType::float32);
    ASSERT_EQ(v, 2.0f);
    if (rank == 1) grid.reset();  // its connections and its watch close
    exchange.fence();             // rank 0 goes on only once rank 1's grid is gone
    if (rank == 1) return;
    try {
      std::vector<float> big(100000, 1.0f);  // the ring path
      grid->world().all_reduce(big.data(), big.size(), ElementType::float32);
      ADD_FAILURE() << "all_reduce returned without rank 1";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), StartsWith("all_reduce on axis 'world' (world ranks 0,1, 400000 bytes) failed after "));
      EXPECT_THAT(e.what(), HasSubstr(" ms: world rank 1 on host "));
      EXPECT_THAT(e.what(), HasSubstr("did not arrive: it is gone (exited, or killed)"));
    }
  });
}

// Count vectors that do not fit the group are refused before anything is sent, naming the
// sizes (or the counts) and the rule, started or not; a group of one checks the same.
TEST(GlooCommunicator, AllToAllvRefusesCountsThatDoNotFitTheGroup) {
  run_ranks(2, [&](int, Exchange& exchange) {
    auto comms = connect(exchange, {{"expert", {0, 1}}});
    GlooCommunicator& comm = *comms[0];
    std::vector<float> in(4, 1.0f), out(4, 0.0f);
    try {
      comm.all_to_allv(in.data(), {1, 1, 1}, out.data(), {1, 1}, ElementType::float32);
      ADD_FAILURE() << "three send counts accepted on two ranks";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("all_to_allv on group 'expert' (2 ranks): send_counts has 3 entries and "
                                      "recv_counts 2; give one count per group rank, 2 each"));
    }
    EXPECT_THROW(comm.start_all_to_allv(in.data(), {1, 1}, out.data(), {1}, ElementType::float32), CommError);
    try {
      comm.all_to_allv(in.data(), {2, 2}, out.data(), {1, 1}, ElementType::float32);
      ADD_FAILURE() << "a block to itself of 2 elements sent and 1 expected was accepted";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("sends 2 elements to itself but expects 1; send_counts[j] on rank r must "
                                      "equal recv_counts[r] on rank j"));
    }
    // The group is still in step: nothing was sent.
    comm.all_to_allv(in.data(), {2, 2}, out.data(), {2, 2}, ElementType::float32);
    EXPECT_EQ(out, std::vector<float>(4, 1.0f));
  });
  SingleRankCommunicator solo("expert", 0);
  std::vector<float> in{1.0f, 2.0f}, out(2, 0.0f);
  EXPECT_THROW(solo.all_to_allv(in.data(), {2, 0}, out.data(), {2}, ElementType::float32), CommError);
  EXPECT_THROW(solo.all_to_allv(in.data(), {2}, out.data(), {1}, ElementType::float32), CommError);
  solo.start_all_to_allv(in.data(), {2}, out.data(), {2}, ElementType::float32);
  EXPECT_EQ(out, in);
}

// The grid counts all-to-alls on the expert axis with the bytes each rank sends: E_p = 2
// (expert groups of 2, expert_data groups of 2) and E_p = 4 (one expert group of 4; the
// expert_data groups are single ranks, which count nothing).
TEST(CommGrid, CountsAllToAllsOnTheExpertAxis) {
  for (const char* text : {"4x1x1x1e2", "4x1x1x1e4"}) {
    SCOPED_TRACE(text);
    const Layout layout = parse_layout(text);
    run_ranks(4, [&](int, Exchange& exchange) {
      CommGrid grid(exchange, layout, kTimeout, true);
      Communicator& expert = grid.axis(CommAxis::expert);
      const int n = expert.size();
      ASSERT_EQ(n, layout.experts);
      const size_t count = 5;
      TypedBuffer in(ElementType::bfloat16, count * static_cast<size_t>(n)), out = in;
      fill_blocks(in, expert.rank(), n, count);
      expert.all_to_all(in.data(), out.data(), count, ElementType::bfloat16);
      expect_blocks(out, expert.rank(), n, count);
      UnevenExchange uneven(expert.rank(), n, ElementType::float32);
      expert.all_to_allv(uneven.in.data(), uneven.send_counts, uneven.out.data(), uneven.recv_counts,
                         ElementType::float32);
      uneven.expect_received(expert.rank(), n);
      Communicator& expert_data = grid.axis(CommAxis::expert_data);
      std::vector<float> ones(8, 1.0f), received(8);
      expert_data.all_to_all(ones.data(), received.data(), 8 / static_cast<size_t>(expert_data.size()),
                             ElementType::float32);
      EXPECT_EQ(received, ones);
      grid.synchronize();

      const auto count_of = [&](CommAxis axis) {
        return grid.counters()[static_cast<size_t>(axis)][static_cast<size_t>(CollectiveKind::all_to_all)];
      };
      EXPECT_EQ(count_of(CommAxis::expert).calls, 2);
      EXPECT_EQ(count_of(CommAxis::expert).bytes,
                static_cast<int64_t>(count * static_cast<size_t>(n) * 2 + uneven.sent_bytes()));
      const bool expert_data_is_one_rank = expert_data.size() == 1;
      EXPECT_EQ(count_of(CommAxis::expert_data).calls, expert_data_is_one_rank ? 0 : 1);
      EXPECT_EQ(count_of(CommAxis::expert_data).bytes, expert_data_is_one_rank ? 0 : 32);
      for (CommAxis axis : {CommAxis::x, CommAxis::data, CommAxis::world}) EXPECT_EQ(count_of(axis).calls, 0);
    });
  }
}

TEST(CommBackend, ParsesItsNamesAndRejectsOthersNamingTheChoices) {
  EXPECT_EQ(parse_comm_backend("gloo"), CommBackend::gloo);
  EXPECT_EQ(parse_comm_backend("nccl"), CommBackend::nccl);
  EXPECT_STREQ(comm_backend_name(CommBackend::nccl), "nccl");
  try {
    parse_comm_backend("mpi");
    FAIL() << "accepted 'mpi'";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'mpi': use gloo (CPU, host buffers) or nccl (GPU, device buffers)"));
  }
}

TEST(CommGrid, GlooGridHasNoNcclStreams) {
  run_ranks(1, [&](int, Exchange& exchange) {
    CommGrid grid(exchange, parse_layout("1x1x1x1"), kTimeout, true);
    EXPECT_EQ(grid.backend(), CommBackend::gloo);
    EXPECT_THROW(grid.nccl(CommAxis::x), CommError);
    grid.synchronize();  // nothing to wait for, and no error
    // Gloo's calls block: nothing to order against a stream, and a stream is a caller's mistake.
    grid.order_with_compute(nullptr);
    int not_a_stream = 0;
    try {
      grid.order_with_compute(&not_a_stream);
      FAIL() << "a gloo grid accepted a CUDA stream";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("this grid runs on gloo")) << e.what();
    }
  });
}

// Without a GPU (or without CUDA in the build) asking for device work fails at once with
// "no CUDA device: " and the reason; the gpu label covers machines that have one.
TEST(CommGridNccl, WithoutAGpuEveryDeviceCallSaysWhy) {
  std::string why;
  if (cuda_device_count(&why) > 0)
    GTEST_SKIP() << "this machine has a CUDA device: test_comm_nccl (label gpu) runs the NCCL backend";
#if AXONN_HAVE_CUDA
  EXPECT_THAT(why, StartsWith("cudaGetDeviceCount: "));
#else
  EXPECT_THAT(why, HasSubstr("this axonn build has no CUDA backend"));
#endif
  run_ranks(1, [&](int, Exchange& exchange) {
    try {
      CommGrid grid(exchange, parse_layout("1x1x1x1"), kTimeout, true, CommBackend::nccl);
      FAIL() << "an NCCL grid was built without a GPU";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), StartsWith("no CUDA device: " + why)) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(" rank 0")) << e.what();
    }
  });
  try {
    select_cuda_device(0, 1);
    FAIL() << "selected a device that is not there";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), StartsWith("no CUDA device: ")) << e.what();
  }
  EXPECT_THROW(DeviceBytes(64), CommError);
}

#if AXONN_HAVE_CUDA
// The one check macro for CUDA and NCCL calls: the call, file:line, host, rank and the
// library's error text, as a CudaError (a CommError).
TEST(CudaCheck, FailureNamesCallPlaceHostRankAndError) {
  set_cuda_check_rank(7);
  int count = 0;
  try {
    AXONN_CUDA_CHECK(ncclCommCount(nullptr, &count));
    FAIL() << "ncclCommCount accepted a null communicator";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), StartsWith("ncclCommCount(nullptr, &count) failed at "));
    EXPECT_THAT(e.what(), HasSubstr("test_comm.cpp:"));
    EXPECT_THAT(e.what(), HasSubstr(" rank 7: "));
    EXPECT_THAT(e.what(), HasSubstr("(ncclInvalidArgument)"));
  }
  try {
    AXONN_CUDA_CHECK(cudaSetDevice(-1));  // no such device, with or without a GPU
    FAIL() << "cudaSetDevice(-1) succeeded";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), StartsWith("cudaSetDevice(-1) failed at "));
    EXPECT_THAT(e.what(), HasSubstr(" rank 7: "));
    EXPECT_THAT(e.what(), HasSubstr("(cudaError"));
  }
  set_cuda_check_rank(-1);
}
#endif

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), float_to_bf16(1.0f));               // tie: to even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);  // tie: up to even
  EXPECT_NE(bf16_to_float(float_to_bf16(std::nanf(""))), bf16_to_float(float_to_bf16(std::nanf(""))));
}

}  // namespace
}  // namespace axonn
