#pragma once
// Reading a shard file's small metadata (attributes and shapes, never the data): what the
// committer indexes and what verify checks against.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/rect.hpp"

namespace axonn {

struct ShardSlice {
  std::string dataset;  // "/slice-00000"
  std::string tensor;
  std::vector<int64_t> global_shape;
  Rect rect;
  int64_t rows_per_block = 1;
  int64_t cols_per_block = 1;  // version 1 shards: all the columns
  std::vector<uint64_t> block_hashes;
  uint64_t xxh3 = 0;
};

struct ShardMeta {
  int64_t format_version = 0;
  int rank = 0;
  int64_t step = 0;
  std::string save_token;
  uint64_t checksum = 0;
  std::vector<ShardSlice> slices;
  int64_t data_bytes() const;
};

// FormatError unless the root attributes say magic "AXONNCKP", a format version this build
// reads (kOldestReadableVersion to kVersion), and kind `expected_kind` ("index" or "shard").
// Returns the version.
int64_t check_header(const h5::Attrs& root, const std::string& file, const std::string& expected_kind);

// Opens `path` read-only and reads its metadata; FormatError for a wrong header or
// inconsistent attributes (hash counts, a checksum that is not the combination of its
// dataset hashes), CheckpointError when HDF5 cannot read it.
ShardMeta read_shard_meta(const std::filesystem::path& path);

}  // namespace axonn
