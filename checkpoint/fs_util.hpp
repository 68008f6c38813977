#pragma once
// POSIX file-system steps of the atomic commit, each checked: a failure is a
// CheckpointError naming the path, the operation and strerror(errno).
#include <filesystem>
#include <string>

namespace axonn {

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

}  // namespace axonn
