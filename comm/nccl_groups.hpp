#pragma once
// Creates the NCCL communicators of many groups at once through the job's Exchange.
//
// The first member of each group (its leader) creates the group's ncclUniqueId. Every
// leader publishes the ids of the groups it leads in one put; one fence over the job makes
// them visible; each member reads its groups' ids from their leaders. Then one
// ncclGroupStart/End initializes all of this rank's communicators together, non-blocking
// (ncclConfig_t.blocking = 0), polled until ready or until the timeout.
//
// Why unique ids rather than ncclCommSplit of a world communicator: one fence however many
// groups, the same protocol as the Gloo bootstrap (gloo_mesh.hpp); each group bootstraps
// among its own members only, all groups at once, where every split is a collective over
// the whole job, one after another; and a group that fails to connect is named in its own
// error. The price: groups share no NCCL resources (ncclConfig_t.splitShare), which costs GPU
// memory only when a rank is in many groups; this grid has at most five.
#include <nccl.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/exchange.hpp"
#include "comm/group_spec.hpp"

namespace axonn {

// Collective over the job, on the current CUDA device. Returns one initialized
// non-blocking communicator per group, in order (a group of one gets a one-rank NCCL
// communicator too). `key` names this bootstrap in the Exchange and must differ between
// calls in one job. Throws CommError naming the group that did not connect within the timeout,
// after aborting every communicator it created.
std::vector<ncclComm_t> connect_nccl_groups(Exchange& exchange, const std::vector<GroupSpec>& groups,
                                            std::chrono::milliseconds timeout, const std::string& key);

}  // namespace axonn
