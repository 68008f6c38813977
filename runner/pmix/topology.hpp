#pragma once
// Where this rank sits in the job: rank, node, local peers, every rank's node and every
// node's host name. Built from PMIx (PMIX_NODEID, PMIX_HOSTNAME per rank, exchanged once
// with one fence so every rank sees the same picture), under Slurm, `axonn run` (where
// --nodes-sim pretends several nodes on one host) and mpirun alike.
#include <string>
#include <vector>

#include "pmix/pmix_client.hpp"

namespace axonn {

struct Topology {
  std::string nspace;
  int rank = 0;
  int world = 1;
  int node = 0;                       // dense node index, 0..nodes-1, ordered by lowest rank
  int nodes = 1;
  int local_rank = 0;                 // index of this rank among its node's ranks
  int local_size = 1;
  std::vector<int> local_peers;       // world ranks on this node, ascending
  std::vector<int> node_of_rank;      // [world]
  std::vector<std::string> hostnames; // [nodes]
  // Ranks per node when every node has the same count, else 0.
  int uniform_tasks_per_node() const;
};

// Collective over the job (one put and one fence).
Topology topology_from_pmix(PmixClient& client);

// "rank 3/8 node 1/2 (host-b) local 1/4 peers 2,3,6,7"
std::string describe(const Topology& topology);

}  // namespace axonn
