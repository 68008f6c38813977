#pragma once
// A restart's load of the memory copies (memory_copies.hpp). restore_from_memory takes the newest step that the nodes'
// memories hold whole, when it is newer than the disk's `latest`. The ranks of every node verify the shards of that
// step their node holds, each its share (deal_memory_shards); every rank learns every shard's table (tensors and
// rectangles, about 100 bytes a slice) and takes the overlaps of its slices at the run's layout with the stored ones
// (checkpoint/memory_pieces.hpp): read in place from its own node's files where the node holds the shard
// (memory_pieces_read.hpp), else asked for over the peer link from the rank that verified it on the first node that
// does. So the restore reshards like a disk load, moves only what each rank reads, sends only what other nodes hold,
// and writes nothing to the memory directory. The pieces land in the trainer's buffers as they come; a copy that fails
// its checks, or pieces that do not arrive whole, are logged and the run loads the disk checkpoint instead, which
// writes every value again (with no disk checkpoint, the initial weights are drawn); a peer lost while loading fails
// the attempt (the next restart).
#include <cstdint>
#include <optional>
#include <string>

#include "comm/communicator.hpp"
#include "comm/peer_link.hpp"
#include "trainer/backend.hpp"
#include "trainer/train/memory_copies.hpp"
#include "trainer/train/trainer.hpp"

namespace axonn {

// What a restore did, for the log and the recovery report.
struct MemoryRestore {
  std::optional<int64_t> step;  // loaded from memory; nullopt: load the disk checkpoint
  std::string why;              // one line: what was found, or why the disk checkpoint is loaded
  int64_t bytes_moved = 0;      // bytes of pieces the ranks received from other nodes
};

// Collective over the job, before the disk resume. `disk_step`: the disk checkpoint's newest
// committed step (0: none). `world`: the job's communicator (host values, host_exchange.hpp).
MemoryRestore restore_from_memory(const MemoryCopyPlan& plan, PeerLink& link, Backend& backend, Communicator& world,
                                  Trainer& trainer, int64_t disk_step, bool data_changed);

}  // namespace axonn
