#pragma once
// What `axonn layout` prices when no --nodes is given: the Slurm allocation it runs in
// (salloc's shell, an sbatch script), read from the variables Slurm sets there.
#include <optional>
#include <string>

namespace axonn {

struct AllocationShape {
  int nodes = 0;
  std::string nodes_from;           // "SLURM_JOB_NUM_NODES=2"
  int ranks_per_node = 0;           // 0: the allocation names no task or GPU count
  std::string ranks_per_node_from;  // "SLURM_NTASKS_PER_NODE=8"; empty with ranks_per_node 0
};

// nullopt outside an allocation (neither SLURM_JOB_NUM_NODES nor SLURM_NNODES is set).
// Nodes from SLURM_JOB_NUM_NODES (else SLURM_NNODES); ranks per node from the first of
// SLURM_NTASKS_PER_NODE, SLURM_NTASKS / nodes (srun starts one rank per task) and
// SLURM_GPUS_ON_NODE (one rank per GPU). Throws UsageError naming the variable for a value
// that is not a positive count, or tasks that do not split evenly over the nodes.
std::optional<AllocationShape> slurm_allocation(int max_count);

}  // namespace axonn
