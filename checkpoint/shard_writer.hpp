#pragma once
// Writing one rank's shard of one step. No coordination: every writing rank calls this with
// only the rectangles it writes (see assign_writers for replicas), then one rank commits.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "checkpoint/rect.hpp"

namespace axonn {

struct ShardWriteResult {
  std::filesystem::path path;  // <dir>/.tmp-step-N/shard-RRRRR.h5
  int64_t data_bytes = 0;      // float32 payload written
  uint64_t checksum = 0;       // combine(dataset hashes)
};

// Writes <dir>/.tmp-step-N/shard-RRRRR.h5: one contiguous float32 dataset per slice with
// its tensor name, global shape, offset and XXH3-64 block hashes (computed from memory) as
// attributes. The file is written under a ".partial" name, fsynced, then renamed, so the
// committer only ever sees complete shards. save_token (any string, the same on every rank
// of one run) lets commit() ignore shards left by an earlier, crashed attempt at this step.
// Throws std::invalid_argument for bad slices (names, rectangles, overlaps, null data) and
// CheckpointError for I/O failures (the partial file is removed).
ShardWriteResult write_shard(const std::filesystem::path& dir, int64_t step, int rank,
                             std::span<const TensorSlice> slices, const std::string& save_token = "");

}  // namespace axonn
