#pragma once
// Reading the stored bytes of a shard dataset straight from its file, for the verified read
// path. Shard datasets are contiguous, unfiltered float32 (the writer makes them so), so their
// bytes are a row-major array at one file offset (h5::contiguous_f32_offset). Why not through
// HDF5: a hyperslab whose rows are strided in the file (some columns of a rectangle) goes
// through HDF5's 64 KiB sieve buffer, which has the kernel copy the skipped columns too and
// then copies the wanted ones again. Measured on the column reshard of bench/checkpoint:
// HDF5's sieve, preadv with the gaps read into scratch, and a mapping copied out before
// hashing all cost 1.2x-1.3x of a same-layout load, one pread per row 2x; a mapping whose runs
// are hashed as they are copied (reader.cpp) about 1.1x.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace axonn {

// Runs strided in a file whose gaps are at most this are read with their gaps (mapped, or
// into scratch) rather than one call per run: copying or mapping a few KiB costs less than a
// system call, and the file is read in order, as readahead expects. Wider gaps are skipped.
inline constexpr int64_t kMaxReadGapBytes = int64_t{64} << 10;

// A read-only mapping of a range of a file, every page faulted in; unmapped on destruction.
class MappedRange {
 public:
  MappedRange(void* map, size_t bytes, int64_t file_begin) : map_(map), bytes_(bytes), begin_(file_begin) {}
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;
  ~MappedRange();
  // The byte at `file_offset` (inside the mapped range).
  const char* at(int64_t file_offset) const { return static_cast<const char*>(map_) + (file_offset - begin_); }

 private:
  void* map_;
  size_t bytes_;
  int64_t begin_;
};

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
  // Maps [offset, offset + bytes) and faults its pages in (MADV_POPULATE_READ), for runs
  // strided in the file: the caller then copies just the runs out (and hashes them while they
  // are in cache), where read_runs would have the kernel copy the gaps too or make one call
  // per run. nullptr where the file cannot be mapped or the kernel cannot populate (before
  // 5.14): read it with read_runs. CheckpointError on an I/O error or a short file.
  std::unique_ptr<MappedRange> map(int64_t offset, int64_t bytes) const;

 private:
  void read_full(int64_t offset, int64_t bytes, char* dst) const;
  int fd_ = -1;
  std::string path_;
};

}  // namespace axonn
