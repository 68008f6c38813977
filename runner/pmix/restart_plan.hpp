#pragma once
// What `axonn run --max-restarts K` does when a job attempt ends: nothing (it succeeded, it
// stopped as asked, or it failed in a way another attempt would meet again), or start the
// job again, on the pretend nodes that are left.
//
// A pretend node is lost when every one of its ranks was killed by a SIGKILL the launcher
// did not send (a `kill -9` of the node's tasks, as when a node vanishes); the next attempt
// runs on the other nodes, with fewer ranks, and the trainer picks a layout for that size.
// Any other failure (one rank killed or crashed, a non-zero exit, a hung rank named by the
// collective timeout) restarts every rank at the same size. When every node would be lost,
// all of them are kept: this machine is still here, so the failure was not its nodes'.
//
// No restart after: success (0); a stop on request (every rank exited 75, or the launcher
// got SIGINT or SIGTERM); bad input (2) or no fitting layout (3); or once K restarts are used.
#include <string>
#include <vector>

#include "runner/pmix/local_launcher.hpp"

namespace axonn {

struct RestartPlan {
  bool restart = false;
  int ranks = 0;      // of the next attempt
  int nodes_sim = 0;  // pretend nodes of the next attempt
  // One line: "pretend node h-n1 (ranks 4-7) was lost: restarting 4 ranks on 1 pretend node",
  // "restarting all 4 ranks"; without a restart, why not ("restart limit 2 reached"; empty on
  // success or after a stop on request).
  std::string why;
  // The attempt's pretend nodes (host names) that were lost, and those left, in order: the
  // next attempt's nodes are these, renamed "<host>-n0", ... (pretend_nodes).
  std::vector<std::string> lost_hosts, kept_hosts;
};

// `attempt` ran and gave `result`; `restarts_done` restarts came before it.
RestartPlan plan_restart(const LocalJobOptions& attempt, const LocalJobResult& result, int restarts_done,
                         int max_restarts);

}  // namespace axonn
