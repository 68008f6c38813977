#pragma once
// The job description the local launcher's PMIx server registers for its namespace: the
// keys Slurm's mpi/pmix plugin gives its tasks, for every pretend node at once, so a rank
// sees under `axonn run --nodes-sim K` what it sees under `srun -N K --mpi=pmix`.
#include <string>
#include <vector>

#include "runner/pmix/pmix_util.hpp"
#include "runner/pmix/pretend_nodes.hpp"

namespace axonn::pmix_detail {

// Job level: PMIX_JOBID, PMIX_UNIV_SIZE, PMIX_JOB_SIZE, PMIX_MAX_PROCS, PMIX_NUM_NODES,
// PMIX_SPAWNED, PMIX_NODE_MAP and PMIX_PROC_MAP (regexes of the comma lists, which give
// the right local peers where a "0-3" range does not).
// One PMIX_NODE_INFO_ARRAY per node: PMIX_NODEID, PMIX_HOSTNAME, PMIX_LOCAL_PEERS,
// PMIX_LOCAL_SIZE, PMIX_NODE_SIZE, PMIX_LOCALLDR. A client reads the array of the node its
// own PMIX_HOSTNAME names, so job-level PMIX_LOCAL_PEERS differs per pretend node.
// One PMIX_PROC_DATA per rank (PMIX_RANK first): PMIX_APPNUM, PMIX_APPLDR,
// PMIX_GLOBAL_RANK, PMIX_APP_RANK, PMIX_LOCAL_RANK, PMIX_NODE_RANK, PMIX_NODEID,
// PMIX_HOSTNAME.
void add_job_info(InfoList& info, const std::string& nspace, const std::vector<PretendNode>& nodes);

// "0,1,2,3" (never a range).
std::string comma_list(const std::vector<int>& ranks);

}  // namespace axonn::pmix_detail
