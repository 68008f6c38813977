#include "checkpoint/shard_writer.hpp"

#include <cstdio>
#include <map>
#include <stdexcept>

#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

void validate_slices(std::span<const TensorSlice> slices, int rank) {
  std::map<std::string, std::vector<Rect>> by_name;
  std::map<std::string, const std::vector<int64_t>*> shapes;
  for (const TensorSlice& s : slices) {
    validate_tensor_name(s.name);
    validate_rect(s.global_shape, s.rect, "tensor '" + s.name + "'");
    if (s.data == nullptr) throw std::invalid_argument("tensor '" + s.name + "': slice data is null");
    auto [it, fresh] = shapes.emplace(s.name, &s.global_shape);
    if (!fresh && *it->second != s.global_shape) {
      throw std::invalid_argument("tensor '" + s.name + "' is given with global shapes " + shape_string(*it->second) +
                                  " and " + shape_string(s.global_shape) + " by rank " + std::to_string(rank));
    }
    by_name[s.name].push_back(s.rect);
  }
  for (const auto& [name, rects] : by_name) {
    if (auto pair = find_overlap(rects)) {
      throw std::invalid_argument("rank " + std::to_string(rank) + " writes overlapping rectangles of tensor '" + name +
                                  "': " + rect_string(rects[pair->first]) + " and " + rect_string(rects[pair->second]));
    }
  }
}

std::string slice_dataset_name(size_t i) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%05zu", format::kSlicePrefix, i);
  return buf;
}

// Disk to reserve for a shard: its data, 4 KiB alignment per dataset, and generous room for
// the metadata (object headers, attributes, block hashes); the unused part is cut off at
// close.
int64_t reservation(std::span<const TensorSlice> slices) {
  int64_t bytes = int64_t{1} << 20;
  for (const TensorSlice& s : slices) {
    const int64_t data = element_count(s.rect) * 4;
    bytes += (data + 4095) / 4096 * 4096 + 4096 + (16 << 10) + 8 * choose_block_grid(s.rect).count();
  }
  return bytes;
}

}  // namespace

ShardWriteResult write_shard(const fs::path& dir, int64_t step, int rank, std::span<const TensorSlice> slices,
                             const std::string& save_token) {
  if (step < 0 || rank < 0) {
    throw std::invalid_argument("write_shard: step " + std::to_string(step) + " and rank " + std::to_string(rank) +
                                " must be non-negative");
  }
  validate_slices(slices, rank);
  const fs::path tmp = tmp_step_path(dir, step);
  make_dirs(tmp);
  ShardWriteResult result;
  result.path = tmp / shard_file_name(rank);
  const fs::path partial = result.path.string() + ".partial";
  const std::string f = partial.string();
  try {
    h5::Handle file = h5::create_file(partial);
    h5::reserve_file_space(file.get(), reservation(slices), f);
    const h5::Attrs root(file.get(), f);
    root.set_str(format::kAttrMagic, format::kMagic);
    root.set_i64(format::kAttrVersion, format::kVersion);
    root.set_str(format::kAttrKind, "shard");
    root.set_i64(format::kAttrStep, step);
    root.set_i64(format::kAttrRank, rank);
    root.set_str(format::kAttrSaveToken, save_token);
    root.set_str(format::kAttrChecksumAlgorithm, format::kChecksumAlgorithm);
    root.set_i64(format::kAttrSliceCount, static_cast<int64_t>(slices.size()));
    std::vector<uint64_t> dataset_hashes;
    for (size_t i = 0; i < slices.size(); ++i) {
      const TensorSlice& s = slices[i];
      const std::string name = slice_dataset_name(i);
      h5::Handle ds = h5::create_f32_dataset(file.get(), name, s.rect.count, f);
      const BlockGrid grid = choose_block_grid(s.rect);
      const std::vector<uint64_t> blocks = block_hashes(s.data, grid);
      dataset_hashes.push_back(combine_hashes(blocks));
      h5::write_f32_all(ds.get(), s.data, f);
      const h5::Attrs attrs(ds.get(), f);
      attrs.set_str(format::kAttrTensor, s.name);
      attrs.set_i64s(format::kAttrGlobalShape, s.global_shape);
      attrs.set_i64s(format::kAttrOffset, s.rect.offset);
      attrs.set_i64(format::kAttrRowsPerBlock, grid.rows_per_block);
      attrs.set_i64(format::kAttrColsPerBlock, grid.cols_per_block);
      attrs.set_u64s(format::kAttrBlockHashes, blocks);
      attrs.set_u64(format::kAttrXxh3, dataset_hashes.back());
      ds.close(f, "close dataset " + name);
      result.data_bytes += element_count(s.rect) * 4;
    }
    result.checksum = combine_hashes(dataset_hashes);
    root.set_u64(format::kAttrShardChecksum, result.checksum);
    h5::close_reserved_file(file, f);
    fsync_file(partial);
    rename_path(partial, result.path);
    fsync_dir(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove(partial, ec);
    throw;
  }
  return result;
}

}  // namespace axonn
