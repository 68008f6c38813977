#pragma once
// A node's memory copies of the state: steps as they are being saved, never committed there.
//   <node dir>/.tmp-step-000000012/shard-00003.h5   a rank's shard (this node's ranks', and the
//                                                   copies ranks on other nodes sent here)
//   <node dir>/.tmp-step-000000012/meta.h5          the step's metadata, from the committing rank
// Every file appears complete, by one rename. A step can be loaded when some node holds each
// of its shards and its meta.h5: commit_memory_step gathers one node's files into a
// checkpoint directory's committed step, which then loads (and reshards) like any other.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/commit.hpp"
#include "checkpoint/metadata.hpp"

namespace axonn {

inline constexpr const char* kMemoryMetaFileName = "meta.h5";

// What one node holds of one step.
struct MemoryStep {
  int64_t step = 0;
  std::vector<int> shards;  // ranks whose shard is here, ascending
  int world = 0;            // the ranks that wrote the step, from meta.h5; 0 when it is not here
};

// Every step in the node's directory, ascending (none when the directory does not exist).
std::vector<MemoryStep> memory_steps(const std::filesystem::path& node_dir);

// Writes <node dir>/.tmp-step-N/meta.h5: the step's metadata, the save token its shards carry
// and `world`, the ranks whose shards make the step whole.
std::filesystem::path write_memory_meta(const std::filesystem::path& node_dir, int64_t step, const Metadata& metadata,
                                        const std::string& save_token, int world);

// Files as one message: for each, its name (no directory) and its bytes.
std::vector<char> pack_files(std::span<const std::filesystem::path> files);
// Writes a pack_files message's files into `dir`, each by one rename; returns their paths.
std::vector<std::filesystem::path> unpack_files(std::span<const char> message, const std::filesystem::path& dir);

// Deletes the node's steps older than `oldest_kept`.
void remove_memory_steps_before(const std::filesystem::path& node_dir, int64_t oldest_kept);

// Commits the node's copy of `step` (every shard of its meta.h5's world and the meta) as
// step N of the checkpoint directory `dir` (hard links, then commit(): the index built from
// the shards, checked for coverage). CheckpointError naming what is missing.
CommitResult commit_memory_step(const std::filesystem::path& node_dir, int64_t step, const std::filesystem::path& dir);

// A fault for tests (AXONN_TEST_CORRUPT_MEMORY_COPY): flips one bit of the first stored
// element of the lowest-ranked non-empty shard of a committed `step_dir`, so its load fails
// the checksum. Returns the shard it changed (empty when every shard is empty).
std::filesystem::path flip_first_stored_bit(const std::filesystem::path& step_dir);

}  // namespace axonn
