#pragma once
// A file mapped read-only into memory (POSIX mmap, MAP_PRIVATE, PROT_READ), unmapped when the
// last owner lets go. Megatron's .bin and .idx are read this way: a corpus of any size trains
// in place, and the page cache, not the process, holds what was read.
//
// A mapped file that shrinks while mapped (someone truncates it) makes the next read of a lost
// page raise SIGBUS: the price of reading in place. Data files are written once, then read.
#include <cstdint>
#include <memory>
#include <string>

namespace axonn {

class MappedFile {
 public:
  // Maps all of `path`. Throws DataError naming the path: missing, unreadable, not a regular
  // file, or mmap failing. An empty file maps to no bytes (data() is null).
  static std::shared_ptr<const MappedFile> open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const unsigned char* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // madvise hints: sequential for one pass over everything (readahead, early reclaim),
  // random for the trainer's scattered windows of T+1 tokens (no readahead wasted).
  void advise_sequential() const;
  void advise_random() const;

 private:
  MappedFile(std::string path, unsigned char* data, int64_t size);
  std::string path_;
  unsigned char* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace axonn
