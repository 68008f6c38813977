#pragma once
// A node's memory copies of the state: steps as they are being saved, never committed there.
//   <node dir>/.tmp-step-000000012/shard-00003.mem   a rank's memory shard (memory_shard.hpp):
//                                                    this node's ranks', and the copies ranks
//                                                    on other nodes sent here
// Every file appears complete, by one rename. A step can be loaded when some node holds each
// of its shards (rank 0's carries the step's metadata): a restore takes the pieces each rank
// reads from them (memory_pieces.hpp, trainer/train/memory_copies.hpp).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace axonn {

// What one node holds of one step.
struct MemoryStep {
  int64_t step = 0;
  std::vector<int> shards;  // ranks whose shard is here, ascending
  int world = 0;            // the ranks that wrote the step (from any of its shards' headers)
  // Every shard 0..world-1 is here.
  bool whole() const;
};

// Every step in the node's directory, ascending (none when the directory does not exist).
// Files that are no memory shard are left out.
std::vector<MemoryStep> memory_steps(const std::filesystem::path& node_dir);

// Keeps a memory shard (encode_memory_shard's bytes) in the node's directory, under the step and
// rank its header names: written beside, then renamed. With `recycle_step` (a step the node is
// about to drop) the same rank's file of that step, when it is there, is overwritten instead of
// a new one written and the old one deleted: a tmpfs then reuses its pages. Returns its path.
std::filesystem::path store_memory_shard(const std::filesystem::path& node_dir, std::span<const char> bytes,
                                         std::optional<int64_t> recycle_step = std::nullopt);

// <node dir>/.tmp-step-N/shard-RRRRR.mem
std::filesystem::path memory_shard_path(const std::filesystem::path& node_dir, int64_t step, int rank);

// Deletes the node's steps older than `oldest_kept`.
void remove_memory_steps_before(const std::filesystem::path& node_dir, int64_t oldest_kept);

// A fault for tests (AXONN_TEST_CORRUPT_MEMORY_COPY): flips one bit of the last byte of a
// memory shard's file, the last float of its data when it holds any.
void flip_last_bit(const std::filesystem::path& path);

}  // namespace axonn
