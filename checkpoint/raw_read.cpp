#include "checkpoint/raw_read.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"

namespace axonn {
namespace {

constexpr int64_t kMaxRunsPerCall = 1024;  // IOV_MAX on Linux

constexpr const char* kEndsEarly = "the file ends early (truncated? it is shorter than its index says)";

[[noreturn]] void fail_read(const std::string& path, int64_t offset, int64_t bytes, const std::string& why) {
  throw CheckpointError(path, "read",
                        "read of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " of " +
                            path + " failed: " + why);
}

}  // namespace

RawFile::RawFile(const std::filesystem::path& path) : path_(path.string()) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    throw CheckpointError(path_, "open", "cannot open " + path_ + " for reading: " + std::strerror(err));
  }
}

RawFile& RawFile::operator=(RawFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

RawFile::~RawFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RawFile::read_full(int64_t offset, int64_t bytes, char* dst) const {
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(fd_, dst + done, static_cast<size_t>(bytes - done), static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_read(path_, offset, bytes, std::strerror(errno));
    if (n == 0) fail_read(path_, offset, bytes, kEndsEarly);
    done += n;
  }
}

void RawFile::read_runs(int64_t offset, int64_t rows, int64_t run_bytes, int64_t file_stride, char* dst,
                        int64_t dst_stride) const {
  if (file_stride == run_bytes && dst_stride == run_bytes) return read_full(offset, rows * run_bytes, dst);
  const int64_t gap = file_stride - run_bytes;
  if (gap > kMaxReadGapBytes) {
    for (int64_t r = 0; r < rows; ++r) read_full(offset + r * file_stride, run_bytes, dst + r * dst_stride);
    return;
  }
  // One contiguous stretch of the file per call, scattered with preadv: the runs into dst, the
  // gaps between them into a scratch buffer.
  std::vector<char> scratch(static_cast<size_t>(gap));
  const int64_t per_call = gap > 0 ? kMaxRunsPerCall / 2 : kMaxRunsPerCall;
  std::vector<iovec> iov;
  for (int64_t r0 = 0; r0 < rows;) {
    const int64_t n = std::min(rows - r0, per_call);
    iov.clear();
    for (int64_t k = 0; k < n; ++k) {
      iov.push_back(iovec{dst + (r0 + k) * dst_stride, static_cast<size_t>(run_bytes)});
      if (gap > 0 && k + 1 < n) iov.push_back(iovec{scratch.data(), static_cast<size_t>(gap)});
    }
    const int64_t at = offset + r0 * file_stride;
    const int64_t want = n * run_bytes + (n - 1) * gap;
    ssize_t got = ::preadv(fd_, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(at));
    if (got < 0 && errno != EINTR) fail_read(path_, at, want, std::strerror(errno));
    got = std::max<ssize_t>(got, 0);
    if (got < want) {
      // A short read (a signal, or the end of the file): read the runs it did not complete
      // one by one (at the end of the file, that fails clearly).
      for (int64_t k = got / file_stride; k < n; ++k)
        read_full(at + k * file_stride, run_bytes, dst + (r0 + k) * dst_stride);
    }
    r0 += n;
  }
}

MappedRawFile::MappedRawFile(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw CheckpointError(name, "open", "cannot open " + name + " for reading: " + std::strerror(err));
  }
  struct stat st {};
  void* data = nullptr;
  int err = ::fstat(fd, &st) != 0 ? errno : 0;
  if (err == 0 && st.st_size > 0) {
    data = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) err = errno;
  }
  ::close(fd);  // the mapping keeps the file open
  if (err != 0) throw CheckpointError(name, "map", "cannot map " + name + " into memory: " + std::strerror(err));
  data_ = static_cast<char*>(data);
  size_ = data != nullptr ? static_cast<size_t>(st.st_size) : 0;
}

MappedRawFile::~MappedRawFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace axonn
