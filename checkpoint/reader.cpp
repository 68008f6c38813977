#include "checkpoint/reader.hpp"

#include <algorithm>
#include <array>
#include <future>
#include <map>
#include <stdexcept>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/index_file.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {

namespace {
// Verified reads go in groups of about this many bytes (whole checksum blocks): small
// enough that hashing one group overlaps reading the next, large enough for few calls.
constexpr int64_t kReadGroupBytes = int64_t{16} << 20;
}  // namespace

struct CheckpointReader::Impl {
  fs::path dir;
  std::string index_file;
  IndexContents index;
  std::map<int, h5::Handle> shard_files;     // rank -> open file
  h5::Handle index_handle;                   // opened on first VDS read
  std::map<std::string, h5::Handle> vds;     // tensor -> open virtual dataset
  std::array<std::vector<float>, 2> bounce;  // verified reads: kept, so pages are faulted once
  int64_t bytes_read = 0;

  h5::Id shard(const StoredRect& s) {
    auto it = shard_files.find(s.rank);
    if (it == shard_files.end()) it = shard_files.emplace(s.rank, h5::open_file_readonly(dir / s.file)).first;
    return it->second.get();
  }

  void read_vds(const TensorInfo& info, const Rect& wanted, float* dst) {
    if (index_handle.get() < 0) index_handle = h5::open_file_readonly(index_file);
    auto it = vds.find(info.name);
    if (it == vds.end()) it = vds.emplace(info.name, h5::open_dataset(index_handle.get(), info.name, index_file)).first;
    h5::read_f32(it->second.get(), wanted, dst, wanted.count, std::vector<int64_t>(wanted.count.size(), 0), index_file);
    bytes_read += element_count(wanted) * 4;
  }

  void read_unverified(const StoredRect& src, const Rect& region, const Rect& wanted, float* dst) {
    const std::string f = (dir / src.file).string();
    h5::Handle ds = h5::open_dataset(shard(src), src.dataset, f);
    Rect local = region;
    std::vector<int64_t> dst_offset(region.offset.size());
    for (size_t d = 0; d < region.offset.size(); ++d) {
      local.offset[d] -= src.rect.offset[d];
      dst_offset[d] = region.offset[d] - wanted.offset[d];
    }
    h5::read_f32(ds.get(), local, dst, wanted.count, dst_offset, f);
    bytes_read += element_count(region) * 4;
  }

  // Reads the checksum blocks of `src` that `region` touches in groups of whole blocks,
  // pipelined: while group k+1 is read (I/O, under HDF5's lock), a helper thread hashes
  // group k against the index (and copies its part of `region` into dst where needed).
  void read_verified(const TensorInfo& info, const StoredRect& src, const Rect& region, const Rect& wanted,
                     float* dst) {
    const std::string f = (dir / src.file).string();
    h5::Handle ds = h5::open_dataset(shard(src), src.dataset, f);
    const RowRange rows = verified_rows(src.rect, region, src.rows_per_block);
    const int64_t row_elems = row_elements(src.rect);
    const int64_t row_bytes = row_elems * 4;
    const int64_t group_rows =
        std::max<int64_t>(1, kReadGroupBytes / row_bytes / src.rows_per_block) * src.rows_per_block;
    // A group whose every element is wanted is read straight into dst, where each source
    // row is one run when the dimensions after the second agree (always for matrices).
    bool rows_are_runs = true;
    for (size_t d = 2; d < src.rect.count.size(); ++d)
      rows_are_runs = rows_are_runs && src.rect.count[d] == wanted.count[d];
    const int64_t dst_row_elems = row_elements(wanted);
    std::future<void> pending;  // declared after `bounce` (a member): never outlives it
    size_t which = 0;
    for (int64_t g = rows.begin; g < rows.end; g += group_rows) {
      const int64_t g_end = std::min(rows.end, g + group_rows);
      Rect group = src.rect;
      group.offset[0] += g;
      group.count[0] = g_end - g;
      const std::optional<Rect> target = intersect(group, region);
      if (!target) continue;
      const bool direct = rows_are_runs && *target == group;
      Rect local = group;
      std::fill(local.offset.begin(), local.offset.end(), 0);
      local.offset[0] = g;
      const float* first = nullptr;  // the group's first element where it was read to
      int64_t stride = row_elems;    // elements from one source row to the next there
      if (direct) {
        std::vector<int64_t> at(group.offset.size());
        int64_t linear = 0;
        for (size_t d = 0; d < at.size(); ++d) {
          at[d] = group.offset[d] - wanted.offset[d];
          linear = linear * wanted.count[d] + at[d];
        }
        h5::read_f32(ds.get(), local, dst, wanted.count, at, f);
        first = dst + linear;
        stride = dst_row_elems;
      } else {
        std::vector<float>& b = bounce[which];
        which ^= 1;
        b.resize(static_cast<size_t>(element_count(group)));
        h5::read_f32(ds.get(), local, b.data(), group.count, std::vector<int64_t>(group.count.size(), 0), f);
        first = b.data();
      }
      bytes_read += (g_end - g) * row_bytes;
      if (pending.valid()) pending.get();  // rethrows a mismatch found in the previous group
      pending = std::async(std::launch::async, [&info, &src, &wanted, &f, first, stride, group, target, direct, g,
                                                g_end, row_elems, dst] {
        for (int64_t r = g; r < g_end; r += src.rows_per_block) {
          const int64_t n = std::min(src.rows_per_block, g_end - r);
          const uint64_t got = xxh3_64_rows(first + (r - g) * stride, n, row_elems, stride);
          const uint64_t want = src.block_hashes[static_cast<size_t>(r / src.rows_per_block)];
          if (got != want) {
            throw ChecksumMismatch(f, "verify",
                                   "checksum mismatch in " + f + " (" + src.dataset + ", tensor '" + info.name + "', " +
                                       rect_string(src.rect) + ", rows " + std::to_string(r) + ".." +
                                       std::to_string(r + n - 1) + "): stored XXH3-64 " + hex64(want) + ", computed " +
                                       hex64(got) +
                                       "; the shard is corrupt: restore it, or load the previous step (fallback)");
          }
        }
        if (!direct) copy_region(first, group, dst, wanted, *target);
      });
    }
    if (pending.valid()) pending.get();
  }
};

CheckpointReader::CheckpointReader(const fs::path& step_dir) : impl_(std::make_unique<Impl>()) {
  impl_->dir = step_dir;
  const fs::path index = step_dir / kIndexFileName;
  impl_->index_file = index.string();
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec)) {
    throw NoCheckpoint(step_dir.string(), "open", "checkpoint step directory " + step_dir.string() + " does not exist");
  }
  if (!fs::exists(index, ec)) {
    throw MissingShard(index.string(), "open",
                       index.string() + " is missing: " + step_dir.string() + " is not a committed checkpoint step");
  }
  impl_->index = read_index(index);
  for (const ShardInfo& s : impl_->index.shards) {
    const fs::path p = step_dir / s.file;
    if (!fs::exists(p, ec)) {
      throw MissingShard(p.string(), "open",
                         "shard file " + p.string() + " (rank " + std::to_string(s.rank) + ") named by " +
                             index.string() + " is missing; restore it, or load the previous step (fallback)");
    }
  }
}

CheckpointReader CheckpointReader::open_latest(const fs::path& dir) {
  const auto latest = read_latest(dir);
  if (!latest)
    throw NoCheckpoint(dir.string(), "open latest", "no committed checkpoint in " + dir.string() + " (no `latest`)");
  const fs::path step_dir = step_path(dir, *latest);
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec)) {
    throw MissingShard(step_dir.string(), "open latest",
                       (dir / kLatestFileName).string() + " names " + step_dir.filename().string() +
                           ", which does not exist; restore it or load an older step");
  }
  return CheckpointReader(step_dir);
}

CheckpointReader CheckpointReader::open(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path / kIndexFileName, ec)) return CheckpointReader(path);
  return open_latest(path);
}

CheckpointReader CheckpointReader::open_step(const fs::path& dir, int64_t step) {
  return CheckpointReader(step_path(dir, step));
}

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

const fs::path& CheckpointReader::step_dir() const { return impl_->dir; }
int64_t CheckpointReader::step() const { return impl_->index.step; }
const std::string& CheckpointReader::save_token() const { return impl_->index.save_token; }
const Metadata& CheckpointReader::metadata() const { return impl_->index.metadata; }
const std::vector<TensorInfo>& CheckpointReader::tensors() const { return impl_->index.tensors; }
const std::vector<ShardInfo>& CheckpointReader::shards() const { return impl_->index.shards; }
int64_t CheckpointReader::bytes_read() const { return impl_->bytes_read; }

const TensorInfo& CheckpointReader::tensor(const std::string& name) const {
  return find_tensor(impl_->index.tensors, name, impl_->dir.string());
}

void CheckpointReader::read(const SliceRead& slice, const ReadOptions& options) {
  const TensorInfo& info = tensor(slice.name);
  check_request(info, slice.global_shape, slice.rect, impl_->dir.string());
  read(slice.name, slice.rect, slice.data, options);
}

void CheckpointReader::read(const std::string& name, const Rect& wanted, float* dst, const ReadOptions& options) {
  const TensorInfo& info = tensor(name);
  check_request(info, info.global_shape, wanted, impl_->dir.string());
  if (dst == nullptr) throw std::invalid_argument("read of tensor '" + name + "': destination is null");
  if (options.path == ReadPath::index_vds) {
    impl_->read_vds(info, wanted, dst);
    return;
  }
  std::vector<Rect> rects;
  for (const StoredRect& s : info.sources) rects.push_back(s.rect);
  std::vector<CopyOp> ops;
  try {
    ops = plan_copy(rects, wanted);
  } catch (const std::invalid_argument& e) {
    throw FormatError(impl_->index_file, "plan read", impl_->index_file + ": tensor '" + name + "': " + e.what());
  }
  for (const CopyOp& op : ops) {
    const StoredRect& src = info.sources[op.source];
    if (options.verify) {
      impl_->read_verified(info, src, op.region, wanted, dst);
    } else {
      impl_->read_unverified(src, op.region, wanted, dst);
    }
  }
}

}  // namespace axonn
