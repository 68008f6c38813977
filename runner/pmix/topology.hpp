#pragma once
// Where each rank of the job runs: this rank's place, every rank's node and every node's
// host name, the same picture on every rank. Built from PMIx under `srun --mpi=pmix`,
// `axonn run` (where --nodes-sim pretends several nodes on one host) and `mpirun` alike.
#include <string>
#include <vector>

#include "runner/pmix/pmix_client.hpp"

namespace axonn {

struct Topology {
  std::string nspace;                  // the PMIx namespace (job step) of this run
  int rank = 0;
  int world = 1;
  int node = 0;                        // this rank's node, 0..nodes-1
  int nodes = 1;
  int local_rank = 0;                  // index of this rank among its node's ranks
  int local_size = 1;
  std::vector<int> local_peers;        // world ranks on this node, ascending
  std::vector<int> node_of_rank;       // [world] node of every rank
  std::vector<std::string> hostnames;  // [nodes] host name of every node

  const std::string& hostname() const { return hostnames[static_cast<size_t>(node)]; }
  // Ranks per node when every node has the same count, else 0.
  int uniform_tasks_per_node() const;
};

// Collective over the job: every rank calls it once (one put of this rank's PMIX_NODEID
// and PMIX_HOSTNAME, one collecting fence, one get per rank). Nodes are numbered in the
// order of their lowest rank, so node ids are dense and equal on every rank whatever ids
// the server uses. A server without PMIX_NODEID: the host name tells nodes apart; without
// PMIX_HOSTNAME either: this machine's host name.
Topology topology_from_pmix(PmixClient& client);

// "rank 3/8 node 1/2 (host-b) local 1/4 peers 2,3,6,7"
std::string describe(const Topology& topology);

}  // namespace axonn
