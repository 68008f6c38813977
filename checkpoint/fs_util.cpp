#include "checkpoint/fs_util.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint_error.hpp"

namespace axonn {

void throw_errno(const std::filesystem::path& path, const std::string& op, int err) {
  throw CheckpointError(path.string(), op, op + " " + path.string() + " failed: " + std::strerror(err));
}

namespace {

void fsync_path(const std::filesystem::path& path, int flags, const std::string& op) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw_errno(path, op, errno);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw_errno(path, op, err);
  }
  if (::close(fd) != 0) throw_errno(path, op, errno);
}

}  // namespace

void fsync_file(const std::filesystem::path& path) { fsync_path(path, O_RDONLY, "fsync"); }

void fsync_dir(const std::filesystem::path& dir) { fsync_path(dir, O_RDONLY | O_DIRECTORY, "fsync directory"); }

void rename_path(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    throw CheckpointError(to.string(), "rename",
                          "rename " + from.string() + " -> " + to.string() + " failed: " + std::strerror(err));
  }
}

void exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    const int err = errno;
    throw CheckpointError(b.string(), "exchange",
                          "renameat2(RENAME_EXCHANGE) " + a.string() + " <-> " + b.string() +
                              " failed: " + std::strerror(err) +
                              " (the file system must support atomic exchange to overwrite a committed step)");
  }
}

void write_file_atomic(const std::filesystem::path& path, const std::string& content) {
  std::string tmp_name = ".";
  tmp_name += path.filename().string();
  tmp_name += ".tmp";
  const std::filesystem::path tmp = path.parent_path() / tmp_name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(tmp, "create", errno);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw_errno(tmp, "write", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw_errno(tmp, "fsync", err);
  }
  if (::close(fd) != 0) throw_errno(tmp, "close", errno);
  rename_path(tmp, path);
  fsync_dir(path.parent_path());
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw CheckpointError(path.string(), "read", "cannot read " + path.string() + ": " + std::strerror(errno));
  // Sized once and read in one call (a memory copy's shard is tens of megabytes: a stream that
  // grows as it reads copies it several times); a file that tells no size is streamed.
  const std::streamoff size = in.tellg();
  in.seekg(0);
  if (size <= 0) {
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), size);
  if (in.bad()) throw CheckpointError(path.string(), "read", "cannot read " + path.string() + ": " + std::strerror(errno));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

void make_dirs(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw CheckpointError(dir.string(), "mkdir", "cannot create directory " + dir.string() + ": " + ec.message());
}

std::optional<int64_t> free_bytes(const std::filesystem::path& path) {
  struct statvfs fs = {};
  if (::statvfs(path.c_str(), &fs) != 0) return std::nullopt;
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

void throw_if_disk_full(const std::filesystem::path& file, int64_t needed) {
  // The nearest existing ancestor: a .tmp-step-N that was never created still has a parent.
  std::filesystem::path where = file.parent_path();
  std::error_code ec;
  while (!where.empty() && !std::filesystem::exists(where, ec)) where = where.parent_path();
  const std::optional<int64_t> free = free_bytes(where.empty() ? "." : where);
  if (!free || *free >= needed) return;
  const auto mib = [](int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
    return std::string(buf);
  };
  throw DiskFull(file.string(), "write",
                 "no space to write " + file.string() + ": it needs " + mib(needed) + " (" + std::to_string(needed) +
                     " bytes) and its file system has " + mib(*free) + " free; free " + mib(needed - *free) +
                     " more there (or lower checkpoint.keep); `latest` still names the last committed step");
}

}  // namespace axonn
