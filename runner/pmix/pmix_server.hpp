#pragma once
// The local launcher's PMIx server. The server library starts once per process, at the
// first job (libpmix 4.2 cannot start again after PMIx_server_finalize), with its
// rendezvous files in a directory it creates under $TMPDIR; at exit the directory is
// removed and the library left unfinalized (pmix_server.cpp says why). Each job is one
// namespace (PmixJob), registered with every rank as a client before any child is forked.
// Facts this relies on: docs/architecture.md (PMIx).
#include <functional>
#include <string>
#include <vector>

#include "runner/pmix/pretend_nodes.hpp"

namespace axonn {

// What the server learns about a job's ranks. Every handler runs on PMIx's progress
// thread and must not block: set an atomic, write to a pipe.
struct PmixJobEvents {
  std::function<void(int rank)> connected;   // the rank's PMIx_Init reached the server
  std::function<void(int rank, int status, const std::string& message)> aborted;  // PMIx_Abort
};

class PmixJob {
 public:
  // Registers namespace `nspace` with the job info of `nodes` (the keys Slurm gives,
  // job_info.hpp) and every rank as a client of this user. One job at a time per process:
  // throws PmixError while another PmixJob exists, or when a PMIx call fails.
  PmixJob(const std::string& nspace, const std::vector<PretendNode>& nodes, PmixJobEvents events);
  ~PmixJob();  // frees the slot for the next job; the namespace stays (pmix_server.cpp says why)
  PmixJob(const PmixJob&) = delete;
  PmixJob& operator=(const PmixJob&) = delete;

  // The environment for the child that will be `rank`: `base` without any outer PMIx
  // job's PMIX_* variables (PMIX_MCA_* tuning is kept), plus the server's
  // (PMIx_server_setup_fork: PMIX_NAMESPACE, PMIX_RANK, PMIX_SERVER_URI*, ...) and
  // PMIX_MCA_gds=hash.
  std::vector<std::string> client_environment(int rank, const std::vector<std::string>& base) const;

  const std::string& nspace() const { return nspace_; }
  int world() const { return world_; }

 private:
  void deregister() noexcept;
  void release_job_slot() noexcept;
  std::string nspace_;
  int world_ = 0;
};

// The server's rendezvous directory; empty before the first job started the server and
// once it was removed at exit.
std::string pmix_server_directory();

}  // namespace axonn
