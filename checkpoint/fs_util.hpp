#pragma once
// POSIX file-system steps of the atomic commit, each checked: a failure is a
// CheckpointError naming the path, the operation and strerror(errno).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace axonn {

// CheckpointError "<op> <path> failed: <strerror(err)>".
[[noreturn]] void throw_errno(const std::filesystem::path& path, const std::string& op, int err);

// Flush a file's data and metadata to disk (open + fsync + close).
void fsync_file(const std::filesystem::path& path);
// Flush a directory's entries (creations, renames) to disk.
void fsync_dir(const std::filesystem::path& dir);
// rename(2); the target is replaced when it is a file or an empty directory.
void rename_path(const std::filesystem::path& from, const std::filesystem::path& to);
// Swap two existing paths in one step (renameat2 RENAME_EXCHANGE).
void exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b);
// Replace `path` with `content` atomically: write a temporary beside it, fsync, rename over
// `path`, fsync the directory. A crash leaves either the old or the new content.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);
// The whole file; CheckpointError when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);
// mkdir -p, as a CheckpointError on failure.
void make_dirs(const std::filesystem::path& dir);

// Free bytes for an unprivileged writer on the file system holding `path` (statvfs
// f_bavail), or nullopt when it cannot be asked.
std::optional<int64_t> free_bytes(const std::filesystem::path& path);
// Throws DiskFull, one line, when the file system holding `file` has less than `needed` bytes
// free: "no space to write <file>: it needs 4.0 MiB and the file system has 1.2 MiB free;
// free 2.8 MiB more ...". Returns when there is room (the failure was something else).
void throw_if_disk_full(const std::filesystem::path& file, int64_t needed);

}  // namespace axonn
