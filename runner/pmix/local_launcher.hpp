#pragma once
// `axonn run -n N [--nodes-sim K] ...`: hosts a PMIx server and runs N copies of a command
// on this machine, like `srun --label`. Output lines are prefixed "[rank] "; SIGINT,
// SIGTERM and SIGUSR1 are forwarded to every rank; the first rank to fail (non-zero exit,
// signal, or PMIx_Abort) makes the launcher stop the others (SIGTERM, SIGKILL after the
// grace period) and report that rank. Children die with the launcher (PR_SET_PDEATHSIG).
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace axonn {

struct LocalJobOptions {
  int ranks = 1;
  int nodes_sim = 1;                     // pretend nodes; ranks are split over them in blocks
  std::vector<std::string> argv;         // the command every rank runs
  std::vector<std::string> extra_env;    // "KEY=VALUE" added to every rank's environment
  std::chrono::milliseconds grace{3000}; // SIGTERM -> SIGKILL
  std::string hostname;                  // base host name; empty: this host's
};

struct RankExit {
  int rank = 0;
  int pid = 0;
  int exit_status = -1;  // when exited normally
  int signal = 0;        // when killed by a signal
};

struct LocalJobResult {
  int exit_code = 0;            // 0 when every rank exited 0
  std::string failure;          // "rank 2 exited with status 3", empty on success
  std::vector<RankExit> exits;  // per rank, in rank order
  double connect_s = 0;         // server start to the last child started (diagnostics)
};

// Blocks until every rank has exited. Throws PmixError/std::runtime_error when the job
// cannot be started (bad options, server failure, fork failure).
LocalJobResult run_local_job(const LocalJobOptions& options);

// Pretend nodes for `ranks` split in `nodes` blocks (the first ranks % nodes nodes get one
// more), named "<host>-n<i>" when nodes > 1, else "<host>".
struct PretendNode;
std::vector<PretendNode> pretend_nodes(int ranks, int nodes, const std::string& host);

}  // namespace axonn
