#pragma once
// Reading the stored bytes of a shard dataset straight from its file, for the verified read
// path: the bytes of a checksum tile are runs (its rows) at known file offsets, one chunk per
// tile in format version 3 (h5::RawStorage), rows of a contiguous array in versions 1 and 2.
// Why not through HDF5: its hyperslab reads go through a 64 KiB sieve buffer or its chunk
// cache, a second copy of every byte (measured: 1.2x-1.3x of reading the same bytes directly
// for a column reshard of bench/checkpoint, when version 2 stored tiles strided in the file).
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace axonn {

// Runs strided in a file whose gaps are at most this are read with their gaps (into scratch)
// rather than one call per run: copying a few KiB costs less than a system call, and the file
// is read in order, as readahead expects. Wider gaps are skipped.
inline constexpr int64_t kMaxReadGapBytes = int64_t{64} << 10;

// An open read-only file descriptor (closed on destruction).
class RawFile {
 public:
  RawFile() = default;
  // CheckpointError naming the path and strerror when it cannot be opened.
  explicit RawFile(const std::filesystem::path& path);
  RawFile(RawFile&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  RawFile& operator=(RawFile&& o) noexcept;
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;
  ~RawFile();

  // Reads `rows` runs of `run_bytes`: the first at file byte `offset`, one every `file_stride`
  // bytes, into `dst`, one every `dst_stride` bytes. One call per 1024 runs (preadv) when the
  // gaps between them are at most kMaxReadGapBytes (read into scratch), else one per run.
  // CheckpointError (naming the file) on an I/O error or when the file ends early.
  void read_runs(int64_t offset, int64_t rows, int64_t run_bytes, int64_t file_stride, char* dst,
                 int64_t dst_stride) const;

 private:
  void read_full(int64_t offset, int64_t bytes, char* dst) const;
  int fd_ = -1;
  std::string path_;
};

// A whole file mapped read-only (mmap), unmapped on destruction: a file read once where it
// lies, with no copy (a memory shard verified in its node's memory). An empty file maps to no
// bytes. CheckpointError naming the path and strerror when it cannot be opened or mapped.
class MappedRawFile {
 public:
  explicit MappedRawFile(const std::filesystem::path& path);
  MappedRawFile(const MappedRawFile&) = delete;
  MappedRawFile& operator=(const MappedRawFile&) = delete;
  ~MappedRawFile();

  std::span<const char> bytes() const { return {data_, size_}; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace axonn
