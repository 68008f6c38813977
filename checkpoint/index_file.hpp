#pragma once
// index.h5: the step's table of contents. One virtual dataset per global tensor (what h5py
// users read) whose attributes also list the stored rectangles explicitly (what the reader
// uses), and root attributes with the metadata and per-shard checksums.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/metadata.hpp"
#include "checkpoint/tensor_table.hpp"

namespace axonn {

struct IndexContents {
  int64_t format_version = 0;  // as read (write_index always writes format::kVersion)
  int64_t step = 0;
  std::string save_token;
  Metadata metadata;
  std::vector<TensorInfo> tensors;  // in tensor_names order (sorted by name)
  std::vector<ShardInfo> shards;    // by rank
};

// Writes and fsyncs `path`. VDS source files are plain file names ("shard-00003.h5"), which
// HDF5 resolves against the index file's own directory, so the step directory can be
// renamed or moved.
void write_index(const std::filesystem::path& path, const IndexContents& contents);

// Reads and validates (magic, version, kind, attribute shapes) an index.
IndexContents read_index(const std::filesystem::path& path);
// The same from an index already open (an h5::Id: a file, or an image in memory, as the fuzz
// target opens it); `name` stands for the file in messages.
IndexContents read_index(h5::Id file, const std::string& name);

}  // namespace axonn
