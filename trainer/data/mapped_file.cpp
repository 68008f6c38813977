#include "trainer/data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainer/data/token_data.hpp"

namespace axonn {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw DataError("cannot open data file '" + path + "': " + std::strerror(errno) +
                    " (check the path; a job's relative data.path resolves against the job TOML's folder)");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError("data file '" + path + "' is not a regular file");
  }
  const auto size = static_cast<int64_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw DataError("cannot memory-map '" + path + "' (" + std::to_string(size) + " bytes): " + std::strerror(err));
    }
  }
  ::close(fd);  // the mapping keeps the file open
  return std::shared_ptr<const MappedFile>(new MappedFile(path, static_cast<unsigned char*>(data), size));
}

MappedFile::MappedFile(std::string path, unsigned char* data, int64_t size)
    : path_(std::move(path)), data_(data), size_(size) {}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(size_));
}

// Hints only: a failure changes speed, never what is read, so it is ignored.
void MappedFile::advise_sequential() const {
  if (data_ != nullptr) ::madvise(data_, static_cast<size_t>(size_), MADV_SEQUENTIAL);
}

void MappedFile::advise_random() const {
  if (data_ != nullptr) ::madvise(data_, static_cast<size_t>(size_), MADV_RANDOM);
}

}  // namespace axonn
