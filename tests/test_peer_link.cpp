// The peer link (comm/peer_link.hpp): byte messages between any two ranks, beside the
// collectives, and abort(), which ends the sends and receives a leaving rank waits on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

}  // namespace
}  // namespace axonn
