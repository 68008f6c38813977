// The peer link (comm/peer_link.hpp): byte messages between two connected ranks, beside the
// collectives; connections to the named peers only; and abort(), which ends the sends and
// receives a leaving rank waits on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/peer_link.hpp"
#include "thread_exchange.hpp"

namespace axonn {
namespace {

using test::run_ranks;
using ::testing::HasSubstr;

constexpr auto kTimeout = std::chrono::milliseconds(60'000);

TEST(PeerLink, MessagesArriveWholeWithTheirTags) {
  run_ranks(3, [](int rank, Exchange& exchange) {
    PeerLink link(exchange, kTimeout, true);
    const int next = (rank + 1) % 3, previous = (rank + 2) % 3;
    link.connect(std::vector<int>{next, previous});
    std::vector<char> message(3000 + static_cast<size_t>(rank));
    for (size_t i = 0; i < message.size(); ++i) message[i] = static_cast<char>(i * 7 + static_cast<size_t>(rank));
    std::thread sending([&] {
      link.send(next, 5, message);
      link.send(next, 6, {});
    });
    const std::vector<char> got = link.receive(previous, 5);
    std::vector<char> empty(10, 'x');
    link.receive(previous, 6, empty);
    sending.join();
    ASSERT_EQ(got.size(), 3000u + static_cast<size_t>(previous));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<char>(i * 7 + static_cast<size_t>(previous)));
    EXPECT_TRUE(empty.empty());
  });
}

// A send to a peer that never takes it (as one that died: Gloo fails no such send) waits until
// abort(), then throws saying why; a later send throws at once. Without abort() the send
// would wait out the minute's timeout and fail with Gloo's timeout instead.
TEST(PeerLink, AbortEndsASendThePeerNeverTakes) {
  std::atomic<bool> done{false};
  run_ranks(2, [&](int rank, Exchange& exchange) {
    PeerLink link(exchange, kTimeout, true);
    link.connect(std::vector<int>{1 - rank});
    if (rank == 1) {  // connected, never receiving, until rank 0 is done
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    std::thread aborting([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      link.abort();
    });
    const std::vector<char> message(1 << 20, 'a');
    try {
      link.send(1, 7, message);
      ADD_FAILURE() << "the send returned though rank 1 never received";
    } catch (const CommError& e) {
      EXPECT_THAT(e.what(), HasSubstr("sending between rank 0 and rank 1 (message 7) stopped: this rank is leaving "
                                      "after a failure"));
    }
    aborting.join();
    EXPECT_THROW(link.receive(1, 8), CommError);
    done = true;
  });
}

// Sockets this process holds open.
int open_sockets() {
  int n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(fd.path(), ec).string().starts_with("socket:");
  }
  return n;
}

// 6 ranks in a ring, each naming the rank before and after it: 6 pairs, a socket at each end
// (a link to every rank would hold 15 pairs). A later connect() adds only the pairs it names
// anew; a message to a rank never named is refused, naming the fix.
TEST(PeerLink, ConnectsTheNamedPeersOnly) {
  constexpr int kRanks = 6;
  int before = 0, ring = 0, more = 0;
  run_ranks(kRanks, [&](int rank, Exchange& exchange) {
    PeerLink link(exchange, kTimeout, true);
    exchange.fence();
    if (rank == 0) before = open_sockets();
    exchange.fence();
    const int next = (rank + 1) % kRanks, previous = (rank + kRanks - 1) % kRanks;
    link.connect(std::vector<int>{next, previous, next, rank});  // twice, and itself: once
    if (rank == 0) ring = open_sockets();
    exchange.fence();
    // Ranks 0 and 3 name each other, the others nobody new but their ring peers again.
    const int opposite = (rank + kRanks / 2) % kRanks;
    link.connect(rank % 3 == 0 ? std::vector<int>{opposite, next} : std::vector<int>{previous});
    if (rank == 0) more = open_sockets();
    exchange.fence();
    EXPECT_TRUE(link.connected_to(next));
    EXPECT_EQ(link.connected_to(opposite), rank % 3 == 0);
    if (rank == 1) {
      try {
        link.send(4, 9, std::vector<char>(8));
        ADD_FAILURE() << "a send to a rank never connected went out";
      } catch (const CommError& e) {
        EXPECT_THAT(e.what(), HasSubstr("no connection between rank 1 and rank 4 (message 9): PeerLink::connect "
                                        "names the peers first"));
      }
    }
    std::thread sending([&] { link.send(next, 3, std::vector<char>(100, static_cast<char>(rank))); });
    EXPECT_EQ(link.receive(previous, 3), std::vector<char>(100, static_cast<char>(previous)));
    sending.join();
    if (rank % 3 == 0) {
      std::thread across([&] { link.send(opposite, 4, std::vector<char>(10, 'o')); });
      EXPECT_EQ(link.receive(opposite, 4).size(), 10u);
      across.join();
    }
    exchange.fence();
  });
  EXPECT_EQ(ring - before, 2 * kRanks) << "a socket at each end of the ring's pairs";
  EXPECT_EQ(more - ring, 2) << "the one new pair, ranks 0 and 3";
}

}  // namespace
}  // namespace axonn
