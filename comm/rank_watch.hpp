#pragma once
// Who did not arrive. A collective that times out knows only that some peer never sent:
// Gloo's ring cannot say which, the peer it waited on may itself be waiting on a third rank
// in another group, and the first rank to give up closes its connections, so its peers fail
// next and report *it*. Each rank therefore runs a small TCP service beside its
// communicators (one thread, its own listening socket, nothing shared with the collectives),
// which answers what this rank's collectives are doing: per group, how many collectives it
// has entered and whether one is in flight, for how long, and since when it is in none.
//
// When a collective fails, its rank asks every member of the group (in parallel, waiting at
// most kAskWindow for answers) and names those that have not entered that collective:
//   - no answer within the window: the process is stopped (SIGSTOP) or hung;
//   - connection refused or closed: the process is gone (exited, killed);
//   - in no collective: it runs but has not come (busy elsewhere, or stalled);
//   - in a collective of another group: it waits there, and the same question is asked of
//     that group (a chain of up to kMaxChain groups), so the line names the rank at the end
//     of the chain, the one actually stalled.
// Before it throws (and so before its connections close), it sends that diagnosis to every
// rank's service; a rank whose collective fails afterwards (its peer closed the connection)
// leads its own message with the diagnosis it received. So whichever failure line comes
// first, it names the same rank(s), their host and pid, and the collective's axis.
//
// Bootstrap: every rank publishes its service's address, host name and pid through the
// job's Exchange (publish before a fence, learn after it), as the Gloo pairs are.
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/exchange.hpp"
#include "layout/collective.hpp"

namespace axonn {

class RankWatch {
 public:
  // How long a failing collective waits for the members' answers: a live rank answers in
  // well under a millisecond; a stopped one never does.
  static constexpr std::chrono::milliseconds kAskWindow{300};
  static constexpr int kMaxChain = 4;

  // Listens on `address` (the Gloo device's host address; the port is chosen here) and
  // serves from a thread until destroyed. Throws CommError when the socket cannot be made.
  RankWatch(int world_rank, int world_size, const sockaddr_storage& address);
  ~RankWatch();
  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

  // Collective over the job, around one of its fences: publish() puts this rank's address
  // under `key`, learn() (after the fence) reads every rank's.
  void publish(Exchange& exchange, const std::string& key);
  void learn(Exchange& exchange, const std::string& key);

  // A communicator's group (name, world ranks in group order); returns its slot.
  int add_group(const std::string& name, const std::vector<int>& members);
  // Around each collective of a group: enter() returns its number in the group (1, 2, ...).
  uint64_t enter(int slot, CollectiveKind kind);
  void leave(int slot);

  // The one-line message for collective `seq` of group `slot` that failed after `elapsed`
  // (timed out when elapsed >= timeout): "all_reduce on axis 'x' (world ranks 2,3, 4000
  // bytes) timed out after 1500 ms: world rank 3 on host h (pid 123) did not arrive: it does
  // not answer (stopped, or hung) [gloo: ...]". When another rank's diagnosis arrived first,
  // it leads with that one. Tells every rank its own diagnosis before returning.
  std::string explain_failure(int slot, uint64_t seq, CollectiveKind kind, size_t bytes,
                              std::chrono::milliseconds elapsed, std::chrono::milliseconds timeout,
                              const std::string& transport_error);

 private:
  struct Group {
    std::string name;
    std::vector<int> members;
    uint64_t entered = 0;
    bool in_flight = false;
    CollectiveKind kind = CollectiveKind::barrier;
    std::chrono::steady_clock::time_point since;  // entered the one in flight
  };
  struct Peer {
    std::vector<char> address;  // a sockaddr_storage's bytes
    std::string host;
    long pid = 0;
  };
  struct Answer;  // one rank's reply, or why there is none (rank_watch.cpp)

  void serve();
  std::string status_line();
  std::vector<Answer> ask(const std::vector<int>& ranks, const std::string& request,
                          std::chrono::steady_clock::time_point deadline) const;
  std::string who(int rank) const;  // "world rank 3 on host h (pid 123)"
  std::string explain_missing(const std::string& group_name, uint64_t first_member, uint64_t seq,
                              const std::vector<int>& members, int depth, std::vector<int>& asked,
                              std::vector<int>& unreachable);

  int rank_;
  int size_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::vector<Peer> peers_;  // [world], after learn()

  std::mutex mutex_;
  std::vector<Group> groups_;
  std::chrono::steady_clock::time_point last_left_;  // the end of the last collective, any group
  std::optional<std::string> notice_;                // the first diagnosis another rank sent

  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace axonn
