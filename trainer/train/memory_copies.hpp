#pragma once
// Copies of the training state in the memory of the job's nodes, so a restart after a failure
// loses no step (docs/running.md, "Memory copies"). Every checkpoint.memory_interval steps
// (memory_interval.hpp says which) each rank saves the shard it would write to disk (training_checkpoint.hpp) into its
// node's memory directory, a tmpfs, as a raw memory shard (checkpoint/memory_shard.hpp; rank 0's carries the step's
// metadata), and sends it over the peer link to its buddy, a rank on the next node, which keeps it in that node's
// directory: the shards of a lost node survive on the next one. The writing and sending are the save's writer thread's
// work, so training pauses only while the state is copied into host buffers, as for a disk save.
//
// A restarted run loads the newest step the nodes hold whole from them (memory_restore.hpp).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/peer_link.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn {

// <memory_dir>/axonn-<job>-<hash of checkpoint.dir>: one job's copies, a directory per node
// (<host>) in it. `job`: the Slurm job id, or the key `axonn run` gives its ranks
// (AXONN_MEMORY_KEY); both stay across restarts. Two runs of one Slurm job into different
// checkpoint directories keep their copies apart.
std::filesystem::path memory_job_dir(const std::filesystem::path& memory_dir, const std::string& job,
                                     const std::string& checkpoint_dir);

// Who keeps whose copy. Node n's local rank l sends to the local rank l (mod its size) of
// node n+1 (mod nodes); with one node, nobody (the node's own copy survives a rank's failure).
struct MemoryCopyPlan {
  std::filesystem::path node_dir;  // this rank's node's copies
  int rank = 0;
  int buddy = -1;            // the rank that keeps this rank's copy; -1: one node
  std::vector<int> senders;  // the ranks whose copies this rank keeps
  std::vector<std::vector<int>> node_ranks;  // [nodes] each node's ranks, ascending
  int node = 0;
  int world = 1;
  // A node's lowest rank prunes its node's files and answers for them in a restore's inventory.
  int leader(int of_node) const { return node_ranks[static_cast<size_t>(of_node)].front(); }
  bool leads_node() const { return leader(node) == rank; }
};
MemoryCopyPlan plan_memory_copies(std::span<const int> node_of_rank, int rank, std::filesystem::path node_dir);

// A restore's share of the work: which rank of each node that holds a shard of the step reads,
// verifies and serves it there, by (node, shard). `shard_nodes`: shard -> the nodes holding
// it. A node's shards, in shard order, are dealt to its ranks in turn, so the node's ranks
// check them side by side, each about two (its own and the one it keeps for a sender), and
// none holds more than its share of the node's copies in its memory.
std::map<std::pair<int, int>, int> deal_memory_shards(const MemoryCopyPlan& plan,
                                                      const std::map<int, std::vector<int>>& shard_nodes);

class MemoryCopies {
 public:
  // Collective over the job: connects the link to the buddy and the senders.
  MemoryCopies(MemoryCopyPlan plan, Trainer& trainer, PeerLink& link, const std::string& save_token);
  // Aborts the link's sends and receives (PeerLink::abort), so a copy in flight ends at once.
  ~MemoryCopies();
  MemoryCopies(const MemoryCopies&) = delete;
  MemoryCopies& operator=(const MemoryCopies&) = delete;

  // The step the run resumed from the nodes' memory: its copies stay until the copy after next,
  // as if this run had made them.
  void restored(int64_t step) { copied_ = {step}; }
  // Starts a copy of the trainer's state (its step() done); returns how long training paused.
  std::chrono::nanoseconds save(double last_lr);
  void poll() { checkpoint_.poll(); }  // rethrows a finished copy's error
  // Whether a copy is still being written and sent (rethrows a finished copy's error).
  bool running() { return !checkpoint_.poll(); }
  void wait() { checkpoint_.wait(); }
  // The longest a finished copy wrote and sent after its pause (after wait()).
  std::chrono::nanoseconds longest_background() const { return longest_background_; }
  int64_t staged_bytes() { return checkpoint_.staged_bytes(); }
  const MemoryCopyPlan& plan() const { return plan_; }
  // The node's lowest rank removes the node's copies (a run that finished has no use for them).
  void remove_node_copies();

 private:
  // On the writer thread: sends this rank's files of `step` to the buddy and keeps the
  // senders' copies; the node's lowest rank then drops the steps before the previous one.
  void exchange(int64_t step, std::span<const TensorSlice> staged, const std::optional<CommitSpec>& commit);

  MemoryCopyPlan plan_;
  PeerLink& link_;
  std::string save_token_;
  std::vector<char> encoded_;                // this rank's copy, reused from copy to copy
  std::vector<std::vector<char>> received_;  // [senders] theirs
  // The steps whose copies the node keeps, oldest first: the last two copied (the writer
  // thread's, one copy at a time). A new copy recycles the files of the older one.
  std::vector<int64_t> copied_;
  std::chrono::nanoseconds longest_background_{0};
  TrainingCheckpoint checkpoint_;
};

// Collective over the job, before the first copy: throws ConfigError (exit 2) on every rank
// when a node's memory directory has too little room for what the copies keep there: this
// step's and the one before's shards of the node's ranks and of the ranks whose buddies they
// are. `shard_bytes`: this rank's shard's data (MemoryCopies::staged_bytes). Copies this job
// holds there already count as room: they are written over. A restore needs no more room
// there: it moves pieces of the copies into the ranks' memory.
void check_memory_room(const MemoryCopyPlan& plan, Backend& backend, Communicator& world, int64_t shard_bytes);

}  // namespace axonn
