#pragma once
// The engine of `axonn run -n N [--nodes-sim K] ...`: hosts a PMIx server and runs N
// copies of a command on this machine, like `srun --label --mpi=pmix`.
// - Ranks see the PMIx keys Slurm gives (job_info.hpp), with --nodes-sim K splitting them
//   into K pretend nodes in blocks, named "<host>-n0", "<host>-n1", ...
// - Their stdout and stderr reach the launcher's as whole lines prefixed "[rank] ".
// - SIGINT, SIGTERM, SIGUSR1, SIGUSR2 and SIGHUP are forwarded to every rank. After SIGINT or
//   SIGTERM the ranks get the grace period to exit, then SIGKILL; a second SIGINT/SIGTERM
//   kills at once.
// - The first rank to fail (non-zero exit, a signal, PMIx_Abort) stops the others: SIGTERM,
//   SIGKILL after the grace period. The result names that rank and how it failed.
// - Exit status 75 (EX_TEMPFAIL: `axonn train` saved a checkpoint and stopped on a signal)
//   gives the others the grace period to exit too, then SIGKILL; when every rank exited
//   with 75 the job's result is 75 and no failure, whatever signal reached the launcher, as
//   srun reports it.
// - Ranks run in their own process group, which is SIGKILLed when the job ends, and die
//   with the launcher (PR_SET_PDEATHSIG), so nothing of the job outlives it.
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "runner/pmix/pretend_nodes.hpp"

namespace axonn {

// The job could not be started: bad options or a command not found (exit code 2), a failed
// pipe or fork (exit code 1).
class LaunchError : public Error {
 public:
  explicit LaunchError(const std::string& message, int exit_code = exit_code::failure) : Error(message, exit_code) {}
};

struct LocalJobOptions {
  int ranks = 1;                          // N
  int nodes_sim = 1;                      // K pretend nodes, 1 <= K <= N
  std::vector<std::string> argv;          // the command every rank runs; argv[0] is searched on PATH
  std::vector<std::string> extra_env;     // "KEY=VALUE" added to (or replacing in) every rank's environment
  std::chrono::milliseconds grace{3000};  // SIGTERM -> SIGKILL
  std::string hostname;                   // base host name of the pretend nodes; empty: this host's
  bool label = true;                      // prefix output lines with "[rank] "
  int stdout_fd = 1;                      // where the ranks' stdout and stderr go
  int stderr_fd = 2;
};

struct RankExit {
  int rank = 0;
  int pid = 0;
  int exit_status = -1;             // when it exited (else -1)
  int signal = 0;                   // when a signal killed it (else 0)
  bool connected = false;           // its PMIx_Init reached the server
  bool killed_by_launcher = false;  // the launcher had sent it SIGKILL (the grace period ended, it was stopped, ...)
};

struct LocalJobResult {
  int exit_code = 0;            // 0 when every rank exited 0; 75 when every rank exited 75; else see `failure`
  std::string failure;          // "rank 2 exited with status 3"; empty on success and when every rank exited 75
  std::vector<RankExit> exits;  // [ranks], in rank order
  double connected_s = -1;      // launcher start to every rank connected; -1 if some never did
  double wall_s = 0;            // launcher start to the last rank's exit
  bool interrupted = false;     // a SIGINT or SIGTERM reached the launcher: the job was asked to stop
  double failed_unix_s = 0;     // wall clock when the launcher saw the first failure (0: none)
  double ended_unix_s = 0;      // wall clock when the last rank had exited
};

// Runs the job and blocks until every rank has exited. exit_code follows the failure:
// the failed rank's exit status; 128+signal when a signal killed it; the PMIx_Abort status
// (1 when that was 0); 128+signal when the launcher was interrupted, unless every rank then
// exited with 75 (a preempted trainer), which makes it 75. Throws LaunchError
// when the job cannot start and PmixError when the PMIx server cannot host it; while
// another job runs in this process, throws PmixError (one job at a time).
LocalJobResult run_local_job(const LocalJobOptions& options);

// "rank 2 exited with status 3", "rank 1 was killed by signal 9 (Killed)".
std::string describe_exit(const RankExit& exit);

}  // namespace axonn
