#pragma once
// What a committed checkpoint holds, as recorded in index.h5: every global tensor with the
// rectangles that store it (which shard file, which dataset, checksums), and every shard.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/blocks.hpp"
#include "checkpoint/rect.hpp"

namespace axonn {

struct StoredRect {
  int rank = 0;                        // the rank that wrote it
  std::string file;                    // "shard-00003.h5", relative to the step directory
  std::string dataset;                 // "/slice-00000" inside that file
  Rect rect;                           // in the global tensor
  int64_t rows_per_block = 1;          // checksum block height (dimension-0 rows)
  int64_t cols_per_block = 1;          // checksum block width (dimension-1 columns; all of them in version 1)
  std::vector<uint64_t> block_hashes;  // XXH3-64 per block, in block order (row-major over the grid)
  uint64_t xxh3 = 0;                   // combine(block_hashes)
  BlockGrid blocks() const { return block_grid(rect, rows_per_block, cols_per_block); }
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<StoredRect> sources;                                   // disjoint, covering the tensor exactly once
  int64_t bytes() const { return element_count(global_shape) * 4; }  // float32
};

struct ShardInfo {
  int rank = 0;
  std::string file;        // "shard-00003.h5"
  uint64_t checksum = 0;   // combine(dataset hashes, in dataset order)
  int64_t data_bytes = 0;  // float32 payload
  int64_t datasets = 0;
};

// The tensor called `name`, or RequestMismatch naming the closest names (`where`: the
// checkpoint, for the message).
const TensorInfo& find_tensor(const std::vector<TensorInfo>& table, const std::string& name, const std::string& where);
// RequestMismatch unless `info` has exactly `expected_shape` and `rect` lies inside it.
void check_request(const TensorInfo& info, const std::vector<int64_t>& expected_shape, const Rect& rect,
                   const std::string& where);

}  // namespace axonn
