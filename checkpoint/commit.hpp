#pragma once
// Committing a step: the one rank that commits waits for every writing rank's shard, builds
// index.h5 from the shards' metadata (never their data), and publishes the step atomically.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "checkpoint/metadata.hpp"

namespace axonn {

struct CommitResult {
  std::filesystem::path step_dir;  // <dir>/step-000000012
  int64_t data_bytes = 0;          // float32 payload of all shards
  int shards = 0;
  bool replaced_existing = false;      // a committed directory of this step was swapped out
  std::vector<int64_t> removed_steps;  // deleted by retention
};

// 1. waits (polling, up to `timeout`) until <dir>/.tmp-step-N/shard-R.h5 exists for every R
//    in expected_ranks with this step and save_token (a shard with another token is left by
//    an earlier attempt: it is ignored until its rank overwrites it);
// 2. reads their metadata and checks that every tensor has one global shape and that its
//    rectangles cover it exactly once (a rectangle written twice, e.g. by two replicas, is a
//    bug the error names with both files);
// 3. writes index.h5 (VDS per tensor, root attributes: magic, version, step, metadata,
//    per-shard XXH3-64 checksums), fsyncs it and the directory;
// 4. renames .tmp-step-N to step-N (atomically exchanging an existing step-N), fsyncs <dir>;
// 5. points `latest` at step-N (temp file, fsync, rename, fsync <dir>);
// 6. retention: keeps the `keep` newest steps, the one `latest` names and `protected_steps`
//    (apply_retention).
// Any failure before 4 throws with `latest` unchanged: CommitTimeout (names the missing
// ranks and why), CheckpointError (inconsistent shards, I/O, or shards still missing
// `after_stop` after `stop` was requested: a rank leaving after a failure waits that much
// longer for the shards other surviving ranks are still writing, not for those that the
// failed ranks will never write).
CommitResult commit(const std::filesystem::path& dir, int64_t step, std::span<const int> expected_ranks,
                    const Metadata& metadata, int keep, std::chrono::milliseconds timeout,
                    const std::string& save_token = "", std::span<const int64_t> protected_steps = {},
                    std::stop_token stop = {}, std::chrono::milliseconds after_stop = {});

}  // namespace axonn
