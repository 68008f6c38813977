#pragma once
// A thin layer over the HDF5 C API: RAII handles, and every return code turned into a
// CheckpointError carrying the file, the operation and HDF5's own error stack (innermost
// first: usually the errno text). HDF5's automatic error printing is switched off in every
// thread that opens or creates a file through here. Only this file and its .cpp include
// hdf5.h; the rest of the library sees hid_t as int64_t.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/rect.hpp"

namespace axonn::h5 {

using Id = int64_t;  // == hid_t (static_assert in the .cpp)

// Owns one HDF5 identifier; closes it on destruction (errors ignored there). Call
// close(...) explicitly where a failed close must be reported (files being written:
// H5Fclose flushes metadata and can run out of space).
class Handle {
 public:
  using Closer = int (*)(Id);
  Handle() = default;
  Handle(Id id, Closer closer) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept;
  ~Handle();
  Id get() const { return id_; }
  void close(const std::string& file, const std::string& operation);

 private:
  Id id_ = -1;
  Closer closer_ = nullptr;
};

// Throws CheckpointError(file, operation) with the current HDF5 error stack, and clears it.
[[noreturn]] void fail(const std::string& file, const std::string& operation);

// Files. Both disable HDF5 file locking (the commit protocol does not need it, and flock
// fails on some parallel file systems) and align objects of 64 KiB or more to 4 KiB.
Handle create_file(const std::filesystem::path& path);
Handle open_file_readonly(const std::filesystem::path& path);
// For repairs and tests that patch attributes; the library itself never rewrites a file.
Handle open_file_readwrite(const std::filesystem::path& path);

// Reserve `bytes` of disk for a file being written (fallocate right after create_file,
// before any sizeable metadata exists), so no later HDF5 write or flush can fail with "no
// space": a failed H5Fclose leaves HDF5 1.10's state broken and its exit handler crashes.
// A full disk (or RLIMIT_FSIZE) then fails here, with a clear CheckpointError. File systems
// without fallocate are written without a reservation. Returns whether space was reserved.
bool reserve_file_space(Id file, int64_t bytes, const std::string& path);
// Close (checked) and cut the file back to the end of allocation its superblock records,
// releasing what the reservation did not use.
void close_reserved_file(Handle& file, const std::string& path);

// float32 datasets. A dataset of `dims` stored in chunks of `chunk_dims` (the writer's chunk
// is one checksum tile, so a tile's bytes lie together in the file), unfiltered, never filled:
// every chunk is written whole with write_f32_chunk.
Handle create_chunked_f32_dataset(Id loc, const std::string& name, const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& chunk_dims, const std::string& file);
// Writes the chunk whose first element is at `chunk_offset`: `elements` floats (the whole
// chunk, row-major over the chunk shape, padded where the chunk passes the dataset's edge),
// straight to the file (no chunk cache, no conversion).
void write_f32_chunk(Id dataset, const std::vector<int64_t>& chunk_offset, const float* data, int64_t elements,
                     const std::string& file);
Handle open_dataset(Id loc, const std::string& name, const std::string& file);
std::vector<int64_t> dataset_dims(Id dataset, const std::string& file);
// How a dataset's float32 bytes lie in its file, for reading them without HDF5 (raw_read.hpp):
// `contiguous` with the file offset of element 0 (format versions 1 and 2), or `chunked` with
// the chunk shape (version 3), in both cases little-endian float32, unfiltered, row-major;
// `other` for anything else (compressed, external, another type), which is read through HDF5.
struct RawStorage {
  enum Kind { other, contiguous, chunked } kind = other;
  int64_t offset = 0;                // contiguous: file offset of element 0
  std::vector<int64_t> chunk_dims;   // chunked
};
RawStorage raw_storage(Id dataset, const std::string& file);
// File offset of the chunk whose first element is at `chunk_offset`; a FormatError naming the
// file and the chunk when it was never written (a shard cut short).
int64_t chunk_file_offset(Id dataset, const std::vector<int64_t>& chunk_offset, const std::string& file);
// Read rectangle `region` (offsets relative to the dataset's origin) into `dst`, a buffer
// row-major over `dst_dims`, at `dst_offset`. HDF5 does the strided scatter.
void read_f32(Id dataset, const Rect& region, float* dst, const std::vector<int64_t>& dst_dims,
              const std::vector<int64_t>& dst_offset, const std::string& file);

// A virtual dataset mapping: rectangle `rect` of the virtual dataset comes from the whole
// of dataset `src_dataset` in file `src_file` (a path relative to the index file).
struct VirtualSource {
  std::string src_file;
  std::string src_dataset;
  Rect rect;
};
// Creates intermediate groups for names with "/".
Handle create_virtual_f32(Id loc, const std::string& name, const std::vector<int64_t>& dims,
                          const std::vector<VirtualSource>& sources, const std::string& file);

// Attributes of one object (a file's root, a dataset). Strings are variable-length UTF-8;
// empty arrays are stored with a null dataspace.
class Attrs {
 public:
  Attrs(Id object, std::string file) : obj_(object), file_(std::move(file)) {}
  bool has(const std::string& name) const;
  // Deletes the attribute (nothing when absent). For repairs and tests, like
  // open_file_readwrite: the library never rewrites a committed file.
  void remove(const std::string& name) const;
  std::vector<std::string> names() const;

  void set_i64(const std::string& name, int64_t v) const;
  void set_u64(const std::string& name, uint64_t v) const;
  void set_f64(const std::string& name, double v) const;
  void set_str(const std::string& name, const std::string& v) const;
  // dims: the attribute's shape ({values.size()} when empty).
  void set_i64s(const std::string& name, const std::vector<int64_t>& values, std::vector<int64_t> dims = {}) const;
  void set_u64s(const std::string& name, const std::vector<uint64_t>& values) const;
  void set_u8s(const std::string& name, const std::vector<uint8_t>& values) const;
  void set_strs(const std::string& name, const std::vector<std::string>& values) const;

  int64_t get_i64(const std::string& name) const;
  uint64_t get_u64(const std::string& name) const;
  double get_f64(const std::string& name) const;
  std::string get_str(const std::string& name) const;
  std::vector<int64_t> get_i64s(const std::string& name) const;
  std::vector<uint64_t> get_u64s(const std::string& name) const;
  std::vector<uint8_t> get_u8s(const std::string& name) const;
  std::vector<std::string> get_strs(const std::string& name) const;

 private:
  Handle open(const std::string& name) const;
  Id obj_;
  std::string file_;
};

}  // namespace axonn::h5
