#pragma once
// The "plan" tool, pure: given what a checkpoint stores and the rectangles each rank of a
// new layout will request, which shard files each new rank opens and how many bytes it
// reads. The reader reads exactly what this predicts (tests compare the two).
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/tensor_table.hpp"

namespace axonn {

struct RectRequest {
  std::string tensor;
  Rect rect;
};

struct RankReadPlan {
  std::vector<std::string> files;  // sorted, each once
  int64_t bytes_wanted = 0;        // float32 bytes of the requested rectangles
  int64_t bytes_read = 0;          // bytes read from shard files (>= wanted when verified)
};

struct ReadPlan {
  std::vector<RankReadPlan> ranks;
  int64_t bytes_wanted = 0;
  int64_t bytes_read = 0;
  int64_t bytes_stored = 0;  // float32 bytes in the checkpoint
};

// Bytes the reader reads from one stored rectangle to fill `region` of it: the whole checksum
// blocks (tiles) the region touches when verified, else just the region.
int64_t source_bytes_read(const StoredRect& source, const Rect& region, bool verified);

// per_rank[r]: what new rank r requests. Throws RequestMismatch for an unknown tensor or a
// rectangle outside its tensor. verified: the default read path (whole checksum blocks).
ReadPlan plan_reads(const std::vector<TensorInfo>& table, const std::vector<std::vector<RectRequest>>& per_rank,
                    bool verified = true);

// One line per rank ("rank 3: 2 files (shard-00001.h5, ...), reads 12.0 MiB for 8.0 MiB
// wanted") and a total line with the read amplification.
std::string format_read_plan(const ReadPlan& plan);

}  // namespace axonn
