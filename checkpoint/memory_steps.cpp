#include "checkpoint/memory_steps.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/memory_shard.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kSuffix = ".mem";

// The rank of "shard-00003.mem", or -1.
int shard_rank(const std::string& name) {
  const size_t prefix = 6, suffix = std::strlen(kSuffix);
  if (name.size() <= prefix + suffix || name.rfind("shard-", 0) != 0 ||
      name.compare(name.size() - suffix, suffix, kSuffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix, name.size() - prefix - suffix);
  if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(digits);
}

// The world a memory shard's header names, 0 when it cannot be read.
int world_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char head[kMemoryShardHeaderBytes];
  if (!in.read(head, sizeof head)) return 0;
  try {
    return static_cast<int>(decode_memory_shard_header(head, path.string()).world);
  } catch (const CheckpointError&) {
    return 0;
  }
}

}  // namespace

bool MemoryStep::whole() const {
  if (world <= 0) return false;
  for (int r = 0; r < world; ++r)
    if (!std::binary_search(shards.begin(), shards.end(), r)) return false;
  return true;
}

fs::path memory_shard_path(const fs::path& node_dir, int64_t step, int rank) {
  std::string name = shard_file_name(rank);  // "shard-00003.h5"
  name.replace(name.size() - 3, 3, kSuffix);
  return tmp_step_path(node_dir, step) / name;
}

std::vector<MemoryStep> memory_steps(const fs::path& node_dir) {
  std::vector<MemoryStep> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(node_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kTmpPrefix, 0) != 0) continue;
    const std::optional<int64_t> step = parse_step_dir_name(name.substr(std::strlen(kTmpPrefix)));
    if (!step) continue;
    MemoryStep s;
    s.step = *step;
    for (const auto& file : fs::directory_iterator(entry.path(), ec)) {
      const int rank = shard_rank(file.path().filename().string());
      if (rank < 0) continue;
      s.shards.push_back(rank);
      if (s.world == 0) s.world = world_of(file.path());
    }
    std::sort(s.shards.begin(), s.shards.end());
    steps.push_back(std::move(s));
  }
  std::sort(steps.begin(), steps.end(), [](const MemoryStep& a, const MemoryStep& b) { return a.step < b.step; });
  return steps;
}

fs::path store_memory_shard(const fs::path& node_dir, std::span<const char> bytes,
                            std::optional<int64_t> recycle_step) {
  const MemoryShardHeader header = decode_memory_shard_header(bytes, "a memory copy for " + node_dir.string());
  const int rank = static_cast<int>(header.rank);
  const fs::path path = memory_shard_path(node_dir, header.step, rank);
  make_dirs(path.parent_path());
  const fs::path partial = path.string() + ".partial";
  if (recycle_step) {
    std::error_code ec;  // gone already (pruned, or never written): a new file below
    fs::rename(memory_shard_path(node_dir, *recycle_step, rank), partial, ec);
  }
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  bool written = fd >= 0;
  for (size_t at = 0; written && at < bytes.size();) {
    const ssize_t n = ::pwrite(fd, bytes.data() + at, bytes.size() - at, static_cast<off_t>(at));
    if (n <= 0 && errno != EINTR) written = false;
    if (n > 0) at += static_cast<size_t>(n);
  }
  written = written && ::ftruncate(fd, static_cast<off_t>(bytes.size())) == 0;
  if (fd >= 0 && ::close(fd) != 0) written = false;
  if (!written) {
    const std::string why = std::strerror(errno);
    std::error_code ec;
    fs::remove(partial, ec);
    throw CheckpointError(partial.string(), "memory copy", "cannot write " + partial.string() + ": " + why);
  }
  rename_path(partial, path);
  return path;
}

void remove_memory_steps_before(const fs::path& node_dir, int64_t oldest_kept) {
  // By the directories' names only: this runs after every copy.
  std::vector<fs::path> old;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(node_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kTmpPrefix, 0) != 0) continue;
    const std::optional<int64_t> step = parse_step_dir_name(name.substr(std::strlen(kTmpPrefix)));
    if (step && *step < oldest_kept) old.push_back(entry.path());
  }
  for (const fs::path& dir : old) fs::remove_all(dir, ec);  // a step another rank removes too is gone either way
}

void flip_last_bit(const fs::path& path) {
  std::fstream bytes(path, std::ios::binary | std::ios::in | std::ios::out);
  char c = 0;
  bytes.seekg(-1, std::ios::end);
  bytes.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  bytes.seekp(-1, std::ios::end);
  bytes.write(&c, 1);
  if (!bytes) throw CheckpointError(path.string(), "memory copy fault", "cannot change " + path.string());
}

}  // namespace axonn
