#pragma once
// The local launcher's PMIx server: one namespace of N ranks on this host, optionally
// split into pretend nodes. Clients get the keys they get under Slurm: PMIX_JOB_SIZE,
// PMIX_UNIV_SIZE, PMIX_NUM_NODES, PMIX_LOCAL_SIZE/PEERS (this server's view: all ranks),
// and per rank PMIX_RANK, PMIX_LOCAL_RANK, PMIX_NODE_RANK, PMIX_NODEID, PMIX_HOSTNAME
// (the pretend node's). Facts this relies on are in ../shared/DESIGN.md.
#include <functional>
#include <string>
#include <vector>

namespace axonn {

struct PretendNode {
  std::string hostname;
  std::vector<int> ranks;  // world ranks on this node, ascending
};

class PmixServer {
 public:
  // on_abort runs on PMIx's progress thread when a client calls PMIx_Abort: it must not
  // block (write to a pipe, set a flag).
  using AbortHandler = std::function<void(int rank, int status, const std::string& message)>;

  // Starts the server library with its rendezvous files in a fresh directory under
  // $TMPDIR and registers the namespace and every client.
  PmixServer(const std::string& nspace, const std::vector<PretendNode>& nodes, AbortHandler on_abort);
  ~PmixServer();  // finalizes and removes the directory
  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

  // The environment a child for `rank` needs: `base` plus the PMIx server's variables.
  std::vector<std::string> client_environment(int rank, const std::vector<std::string>& base) const;

 private:
  std::string nspace_;
  std::string tmpdir_;
  int world_ = 0;
};

}  // namespace axonn
