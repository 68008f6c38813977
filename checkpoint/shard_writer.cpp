#include "checkpoint/shard_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include "checkpoint/checkpoint_error.hpp"
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

// Disk to reserve for a shard: its tiles as whole chunks (edge tiles padded), each 4 KiB
// aligned, and generous room for the metadata (object headers, chunk indexes, attributes,
// block hashes); the unused part is cut off at close.
int64_t reservation(std::span<const TensorSlice> slices) {
  int64_t bytes = int64_t{1} << 20;
  for (const TensorSlice& s : slices) {
    const BlockGrid grid = choose_block_grid(s.rect);
    const int64_t chunk = element_count(tile_chunk_shape(grid, s.rect)) * 4;
    bytes += grid.count() * ((chunk + 4095) / 4096 * 4096 + 64) + (16 << 10);
  }
  return bytes;
}

// Writes every tile of `data` (the rectangle, row-major) as one chunk, in block order, so a
// reader wanting some tiles reads each in one piece and a full read goes through the file in
// order. `chunk` is scratch; edge tiles are padded with zeros.
void write_tiles(h5::Id ds, const float* data, const Rect& rect, const BlockGrid& grid, std::vector<float>& chunk,
                 const std::string& f) {
  const int64_t chunk_row = grid.cols_per_block * grid.inner;
  const int64_t chunk_elems = grid.rows_per_block * chunk_row;
  for (int64_t i = 0; i < grid.block_rows(); ++i) {
    const int64_t rows = grid.row_end(i) - grid.row_begin(i);
    for (int64_t j = 0; j < grid.block_cols(); ++j) {
      const std::vector<int64_t> origin = tile_origin(grid, rect.count.size(), i, j);
      const float* first = data + grid.row_begin(i) * grid.row_elements() + grid.col_begin(j) * grid.inner;
      const int64_t row_elems = grid.block_row_elements(j);
      if (rows == grid.rows_per_block && row_elems == chunk_row && chunk_row == grid.row_elements()) {  // whole rows: already a chunk
        h5::write_f32_chunk(ds, origin, first, chunk_elems, f);
        continue;
      }
      chunk.resize(static_cast<size_t>(chunk_elems));
      if (rows < grid.rows_per_block || row_elems < chunk_row) std::fill(chunk.begin(), chunk.end(), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(chunk.data() + r * chunk_row, first + r * grid.row_elements(),
                    static_cast<size_t>(row_elems) * sizeof(float));
      h5::write_f32_chunk(ds, origin, chunk.data(), chunk_elems, f);
    }
  }
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
    std::vector<float> chunk;
    for (size_t i = 0; i < slices.size(); ++i) {
      const TensorSlice& s = slices[i];
      const std::string name = slice_dataset_name(i);
      const BlockGrid grid = choose_block_grid(s.rect);
      h5::Handle ds = h5::create_chunked_f32_dataset(file.get(), name, s.rect.count, tile_chunk_shape(grid, s.rect), f);
      const std::vector<uint64_t> blocks = block_hashes(s.data, grid);
      dataset_hashes.push_back(combine_hashes(blocks));
      write_tiles(ds.get(), s.data, s.rect, grid, chunk, f);
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
  } catch (const CheckpointError&) {
    std::error_code ec;
    fs::remove(partial, ec);
    // Where the space is not reserved up front (no fallocate), a full disk fails inside
    // HDF5: say so in one line instead of HDF5's stack.
    throw_if_disk_full(result.path, reservation(slices));
    throw;
  } catch (...) {
    std::error_code ec;
    fs::remove(partial, ec);
    throw;
  }
  return result;
}

}  // namespace axonn
