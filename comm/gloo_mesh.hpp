#pragma once
// Connects Gloo contexts for many groups at once through the job's Exchange.
//
// Every rank creates one TCP pair per peer in each of its groups, publishes all its pair
// addresses in one put, joins one fence over the job, then reads from each peer the
// address that peer created for it and connects (all pairs concurrently); a last fence
// keeps every rank until all are connected. Two fences however many groups, and the same
// calls on every rank, so it cannot deadlock on group order (Gloo's own connectFullMesh
// makes rank-dependent store calls that a fence-based store cannot match).
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/exchange.hpp"
#include "comm/group_spec.hpp"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace axonn {

// The TCP device every group of this process shares (one listening socket). Binds to
// AXONN_GLOO_IFACE if set, else to AXONN_GLOO_HOSTNAME, else to this host's name
// (127.0.0.1 when the job is on one host).
std::shared_ptr<gloo::transport::Device> make_gloo_device(bool single_host);

// The host address that device listens on (port 0), for other services of this rank that
// the peers must reach the same way (rank_watch.hpp).
sockaddr_storage gloo_host_address(bool single_host);

// Collective over the job. Returns one connected context per spec, in order. Groups
// of size 1 get a context with no peers. `key` names this bootstrap in the Exchange and
// must differ between calls in one job (e.g. "grid", "grid-after-resize").
std::vector<std::shared_ptr<gloo::Context>> connect_gloo_groups(Exchange& exchange,
                                                                const std::shared_ptr<gloo::transport::Device>& device,
                                                                const std::vector<GroupSpec>& groups,
                                                                std::chrono::milliseconds timeout,
                                                                const std::string& key);

}  // namespace axonn
