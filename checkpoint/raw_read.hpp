#pragma once
// Reading the stored bytes of a shard dataset straight from its file (pread/preadv), for the
// verified read path. Why not through HDF5: a hyperslab whose rows are strided in the file
// (some columns of a rectangle) goes through HDF5's 64 KiB sieve buffer, which reads the
// skipped columns too and copies everything twice; that cost the column reshard about a
// quarter of a same-layout load. Shard datasets are contiguous, unfiltered float32 (the
// writer makes them so), so their bytes are a row-major array at one file offset.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace axonn {

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
  // bytes, into `dst`, one every `dst_stride` bytes. Runs adjacent in the file are read with
  // one call per 1024 runs (preadv), others one call each, so only the runs' bytes are read.
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
