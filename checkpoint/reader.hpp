#pragma once
// Reading a committed step at any layout: each rank asks for the rectangles it owns now.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/metadata.hpp"
#include "checkpoint/rect.hpp"
#include "checkpoint/tensor_table.hpp"

namespace axonn {

enum class ReadPath {
  // Default. Opens the shard files directly; the reshard math picks the stored rectangles
  // that intersect the request; the whole checksum blocks (tiles of rows x columns) the
  // request touches are read and verified against the index's XXH3-64, and the
  // intersection is copied out.
  shards,
  // Reads the request as a hyperslab of index.h5's virtual dataset: HDF5 stitches the
  // shards (what h5py users see). No checksum verification.
  index_vds,
};

struct ReadOptions {
  ReadPath path = ReadPath::shards;
  bool verify = true;  // shards path only: false reads just the intersections, unverified
};

// Not thread-safe: one reader per thread (HDF5 serializes calls anyway).
class CheckpointReader {
 public:
  // A step directory (holding index.h5). Validates magic and version, and that every
  // shard file the index names exists (MissingShard otherwise).
  explicit CheckpointReader(const std::filesystem::path& step_dir);
  // The step `latest` names in checkpoint directory `dir`; NoCheckpoint when there is none.
  static CheckpointReader open_latest(const std::filesystem::path& dir);
  // What a user names on a command line: a step directory (it holds index.h5), or a
  // checkpoint directory (then the step `latest` names).
  static CheckpointReader open(const std::filesystem::path& path);
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const std::filesystem::path& step_dir() const;
  int64_t step() const;
  int64_t format_version() const;  // of index.h5 (format::kOldestReadableVersion to format::kVersion)
  const std::string& save_token() const;
  const Metadata& metadata() const;
  const std::vector<TensorInfo>& tensors() const;           // sorted by name
  const std::vector<ShardInfo>& shards() const;             // by rank
  const TensorInfo& tensor(const std::string& name) const;  // RequestMismatch when absent
  bool has(const std::string& name) const;                  // whether the step holds the tensor

  // Fills slice.data with slice.rect of tensor slice.name. RequestMismatch when the tensor
  // is absent or its global shape is not slice.global_shape (names both shapes);
  // ChecksumMismatch (names the shard file, tensor and rows) when verification fails.
  void read(const SliceRead& slice, const ReadOptions& options = {});
  // The same without a shape expectation (tools).
  void read(const std::string& name, const Rect& wanted, float* dst, const ReadOptions& options = {});

  // Bytes read from disk by this reader so far (shard payload; for the VDS path the
  // requested bytes). plan_reads predicts this number.
  int64_t bytes_read() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace axonn
