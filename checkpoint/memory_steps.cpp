#include "checkpoint/memory_steps.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/index_file.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

// The metadata key meta.h5 keeps the step's world in; not part of the committed step.
constexpr const char* kWorldKey = "memory_copy.world";
constexpr const char* kTmpPrefix = ".tmp-";

// The rank of "shard-00003.h5", or -1.
int shard_rank(const std::string& name) {
  if (name.size() < 10 || name.rfind("shard-", 0) != 0 || name.substr(name.size() - 3) != ".h5") return -1;
  const std::string digits = name.substr(6, name.size() - 9);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(digits);
}

void append_u64(std::vector<char>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t read_u64(std::span<const char> in, size_t& at) {
  if (at + 8 > in.size()) throw std::runtime_error("a memory copy message ends inside a length");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in[at + static_cast<size_t>(i)])} << (8 * i);
  at += 8;
  return v;
}

std::string whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path.string(), "memory copy", "cannot read " + path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

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
      const std::string file_name = file.path().filename().string();
      if (const int rank = shard_rank(file_name); rank >= 0) s.shards.push_back(rank);
      if (file_name == kMemoryMetaFileName) {
        try {
          const IndexContents meta = read_index(file.path());
          const auto world = meta.metadata.ints.find(kWorldKey);
          if (world != meta.metadata.ints.end()) s.world = static_cast<int>(world->second);
        } catch (const CheckpointError&) {
          s.world = 0;  // unreadable: as if it were not here
        }
      }
    }
    std::sort(s.shards.begin(), s.shards.end());
    steps.push_back(std::move(s));
  }
  std::sort(steps.begin(), steps.end(), [](const MemoryStep& a, const MemoryStep& b) { return a.step < b.step; });
  return steps;
}

fs::path write_memory_meta(const fs::path& node_dir, int64_t step, const Metadata& metadata,
                           const std::string& save_token, int world) {
  IndexContents meta;
  meta.step = step;
  meta.save_token = save_token;
  meta.metadata = metadata;
  meta.metadata.ints[kWorldKey] = world;
  const fs::path dir = tmp_step_path(node_dir, step);
  make_dirs(dir);
  const fs::path path = dir / kMemoryMetaFileName;
  const fs::path partial = path.string() + ".partial";
  write_index(partial, meta);
  rename_path(partial, path);
  return path;
}

std::vector<char> pack_files(std::span<const fs::path> files) {
  std::vector<char> message;
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    const std::string bytes = whole_file(file);
    append_u64(message, name.size());
    message.insert(message.end(), name.begin(), name.end());
    append_u64(message, bytes.size());
    message.insert(message.end(), bytes.begin(), bytes.end());
  }
  return message;
}

std::vector<fs::path> unpack_files(std::span<const char> message, const fs::path& dir) {
  make_dirs(dir);
  std::vector<fs::path> written;
  size_t at = 0;
  while (at < message.size()) {
    const uint64_t name_size = read_u64(message, at);
    if (name_size == 0 || name_size > 255 || at + name_size > message.size())
      throw std::runtime_error("a memory copy message holds a file name of " + std::to_string(name_size) + " bytes");
    const std::string name(message.data() + at, name_size);
    at += name_size;
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      throw std::runtime_error("a memory copy message names the file '" + name + "'");
    const uint64_t size = read_u64(message, at);
    if (size > message.size() - at) throw std::runtime_error("a memory copy message's file " + name + " is cut short");
    const fs::path path = dir / name;
    const fs::path partial = path.string() + ".partial";
    {
      std::ofstream out(partial, std::ios::binary | std::ios::trunc);
      out.write(message.data() + at, static_cast<std::streamsize>(size));
      if (!out) throw CheckpointError(partial.string(), "memory copy", "cannot write " + partial.string());
    }
    rename_path(partial, path);
    at += size;
    written.push_back(path);
  }
  return written;
}

void remove_memory_steps_before(const fs::path& node_dir, int64_t oldest_kept) {
  for (const MemoryStep& s : memory_steps(node_dir)) {
    if (s.step >= oldest_kept) continue;
    std::error_code ec;  // a step another rank of the node removes at the same time is gone either way
    fs::remove_all(tmp_step_path(node_dir, s.step), ec);
  }
}

CommitResult commit_memory_step(const fs::path& node_dir, int64_t step, const fs::path& dir) {
  const fs::path from = tmp_step_path(node_dir, step);
  IndexContents meta = read_index(from / kMemoryMetaFileName);
  const auto world = meta.metadata.ints.find(kWorldKey);
  if (world == meta.metadata.ints.end() || world->second < 1)
    throw FormatError(
        (from / kMemoryMetaFileName).string(), "memory copy",
        "the memory copy's meta.h5 does not say how many ranks wrote the step (" + std::string(kWorldKey) + ")");
  const int ranks = static_cast<int>(world->second);
  meta.metadata.ints.erase(world);
  const fs::path to = tmp_step_path(dir, step);
  std::error_code ec;
  fs::remove_all(to, ec);
  make_dirs(to);
  std::vector<int> expected;
  for (int r = 0; r < ranks; ++r) {
    const fs::path shard = from / shard_file_name(r);
    if (!fs::exists(shard))
      throw MissingShard(shard.string(), "memory copy",
                         "the memory copy of " + step_dir_name(step) + " lacks rank " + std::to_string(r) +
                             "'s shard (" + shard.string() + ")");
    fs::create_hard_link(shard, to / shard_file_name(r), ec);
    if (ec) fs::copy_file(shard, to / shard_file_name(r), fs::copy_options::overwrite_existing);
    expected.push_back(r);
  }
  return commit(dir, step, expected, meta.metadata, 1, std::chrono::seconds(10), meta.save_token);
}

fs::path flip_first_stored_bit(const fs::path& step_dir) {
  for (const IndexContents index = read_index(step_dir / kIndexFileName); const ShardInfo& shard : index.shards) {
    if (shard.datasets == 0) continue;
    const fs::path path = step_dir / shard.file;
    int64_t offset = 0;
    {
      const h5::Handle file = h5::open_file_readonly(path);
      const h5::Handle dataset = h5::open_dataset(file.get(), "/slice-00000", path.string());
      const h5::RawStorage storage = h5::raw_storage(dataset.get(), path.string());
      offset =
          storage.kind == h5::RawStorage::chunked
              ? h5::chunk_file_offset(dataset.get(), std::vector<int64_t>(storage.chunk_dims.size(), 0), path.string())
              : storage.offset;
    }
    std::fstream bytes(path, std::ios::binary | std::ios::in | std::ios::out);
    char c = 0;
    bytes.seekg(offset);
    bytes.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    bytes.seekp(offset);
    bytes.write(&c, 1);
    if (!bytes) throw CheckpointError(path.string(), "memory copy fault", "cannot change " + path.string());
    return path;
  }
  return {};
}

}  // namespace axonn
