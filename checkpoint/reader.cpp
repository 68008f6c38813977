#include "checkpoint/reader.hpp"

#include <algorithm>
#include <array>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/index_file.hpp"
#include "checkpoint/raw_read.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {

namespace {
// Verified reads go in groups of about this many bytes (whole checksum blocks): small
// enough that hashing one group overlaps reading the next, large enough for few calls.
constexpr int64_t kReadGroupBytes = int64_t{16} << 20;

// Maximal runs of consecutive indices in [begin, end) with the same `inside`.
struct Run {
  int64_t begin = 0, end = 0;
  bool inside = false;
};
template <typename Inside>
std::vector<Run> runs(int64_t begin, int64_t end, Inside inside) {
  std::vector<Run> out;
  for (int64_t k = begin; k < end; ++k) {
    const bool in = inside(k);
    if (out.empty() || out.back().inside != in) out.push_back(Run{k, k, in});
    out.back().end = k + 1;
  }
  return out;
}

ChecksumMismatch mismatch(const TensorInfo& info, const StoredRect& src, const std::string& f, const BlockGrid& grid,
                          int64_t i, int64_t j, uint64_t want, uint64_t got) {
  return ChecksumMismatch(
      f, "verify",
      "checksum mismatch in " + f + " (" + src.dataset + ", tensor '" + info.name + "', " + rect_string(src.rect) +
          ", its rows " + std::to_string(grid.row_begin(i)) + ".." + std::to_string(grid.row_end(i) - 1) +
          (src.rect.count.size() > 1
               ? ", columns " + std::to_string(grid.col_begin(j)) + ".." + std::to_string(grid.col_end(j) - 1)
               : "") +
          "): stored XXH3-64 " + hex64(want) + ", computed " + hex64(got) +
          "; the shard is corrupt: restore it, or load the previous step (fallback)");
}

}  // namespace

struct CheckpointReader::Impl {
  fs::path dir;
  std::string index_file;
  IndexContents index;
  std::map<int, h5::Handle> shard_files;     // rank -> open file
  std::map<int, RawFile> raw_files;          // rank -> the same file, for verified reads
  h5::Handle index_handle;                   // opened on first VDS read
  std::map<std::string, h5::Handle> vds;     // tensor -> open virtual dataset
  std::array<std::vector<float>, 2> bounce;  // verified reads: kept, so pages are faulted once
  int64_t bytes_read = 0;

  h5::Id shard(const StoredRect& s) {
    auto it = shard_files.find(s.rank);
    if (it == shard_files.end()) it = shard_files.emplace(s.rank, h5::open_file_readonly(dir / s.file)).first;
    return it->second.get();
  }

  const RawFile& raw(const StoredRect& s) {
    auto it = raw_files.find(s.rank);
    if (it == raw_files.end()) it = raw_files.emplace(s.rank, RawFile(dir / s.file)).first;
    return it->second;
  }

  // Reads `local` (a piece of `src` in its coordinates, whole checksum tiles, whole in the
  // dimensions after 1) into `to`, a buffer row-major over `to_dims`, at `to_at`. Straight from
  // the file where the dataset is stored as a writer of this library stores it (raw_read.hpp):
  // tile by tile from its chunks (version 3), or row by row from a contiguous array (versions 1
  // and 2); through HDF5 otherwise.
  void read_piece(h5::Id ds, const h5::RawStorage& storage, const StoredRect& src, const BlockGrid& grid,
                  const Rect& local, float* to, const std::vector<int64_t>& to_dims, const std::vector<int64_t>& to_at,
                  const std::string& f) {
    const int64_t to_row_bytes = element_count(to_dims) / to_dims[0] * 4;
    auto to_at_local = [&](int64_t row, int64_t col) {  // `to` at the piece's (row, col), local to src
      int64_t linear = 0;
      for (size_t d = 0; d < to_dims.size(); ++d) {
        const int64_t at = to_at[d] + (d == 0 ? row - local.offset[0] : d == 1 ? col - local.offset[1] : 0);
        linear = linear * to_dims[d] + at;
      }
      return reinterpret_cast<char*>(to + linear);
    };
    const int64_t col = local.offset.size() > 1 ? local.offset[1] : 0;
    const int64_t cols = local.count.size() > 1 ? local.count[1] : 1;
    if (storage.kind == h5::RawStorage::contiguous) {
      raw(src).read_runs(storage.offset + (local.offset[0] * grid.cols + col) * grid.inner * 4, local.count[0],
                         cols * grid.inner * 4, grid.row_elements() * 4, to_at_local(local.offset[0], col),
                         to_row_bytes);
    } else if (storage.kind == h5::RawStorage::chunked) {
      // Each tile is one chunk: its rows lie one after another, a chunk row apart.
      const int64_t chunk_row_bytes = grid.cols_per_block * grid.inner * 4;
      const BlockSpan span = blocks_touched(grid, Rect{std::vector<int64_t>(local.count.size(), 0), src.rect.count},
                                            local);
      for (int64_t i = span.i_begin; i < span.i_end; ++i) {
        for (int64_t j = span.j_begin; j < span.j_end; ++j) {
          const std::vector<int64_t> origin = tile_origin(grid, local.count.size(), i, j);
          raw(src).read_runs(h5::chunk_file_offset(ds, origin, f), grid.row_end(i) - grid.row_begin(i),
                             grid.block_row_elements(j) * 4, chunk_row_bytes,
                             to_at_local(grid.row_begin(i), grid.col_begin(j)), to_row_bytes);
        }
      }
    } else {
      h5::read_f32(ds, local, to, to_dims, to_at, f);
    }
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

  // Reads the checksum blocks (tiles) of `src` that `region` touches, in pieces of whole blocks,
  // pipelined: while piece k+1 is read, a helper thread hashes piece
  // k's blocks against the index (and copies its part of `region` into dst where needed).
  void read_verified(const TensorInfo& info, const StoredRect& src, const Rect& region, const Rect& wanted,
                     float* dst) {
    const std::string f = (dir / src.file).string();
    h5::Handle ds = h5::open_dataset(shard(src), src.dataset, f);
    const BlockGrid grid = src.blocks();
    h5::RawStorage storage = h5::raw_storage(ds.get(), f);
    // Chunks that are not this dataset's tiles (rewritten by another tool): through HDF5.
    if (storage.kind == h5::RawStorage::chunked && storage.chunk_dims != tile_chunk_shape(grid, src.rect))
      storage.kind = h5::RawStorage::other;
    const BlockSpan span = blocks_touched(grid, src.rect, region);
    const size_t rank = src.rect.count.size();
    // The region's rows and columns, local to src.
    const int64_t r0 = region.offset[0] - src.rect.offset[0], r1 = r0 + region.count[0];
    const int64_t c0 = rank > 1 ? region.offset[1] - src.rect.offset[1] : 0;
    const int64_t c1 = rank > 1 ? c0 + region.count[1] : 1;
    // A block inside the region is read straight into dst, where each of its rows is one run
    // when the dimensions after the second are whole in src, region and dst (always for
    // matrices); the others (at most the first and last block row and column) go through a
    // buffer and only their part of the region is copied out.
    bool inner_whole = true;
    for (size_t d = 2; d < rank; ++d)
      inner_whole = inner_whole && region.count[d] == src.rect.count[d] && wanted.count[d] == src.rect.count[d];
    const std::vector<Run> row_runs = runs(span.i_begin, span.i_end, [&](int64_t i) {
      return inner_whole && grid.row_begin(i) >= r0 && grid.row_end(i) <= r1;
    });
    const std::vector<Run> col_runs =
        runs(span.j_begin, span.j_end, [&](int64_t j) { return grid.col_begin(j) >= c0 && grid.col_end(j) <= c1; });
    const int64_t band_bytes =
        (grid.col_end(span.j_end - 1) - grid.col_begin(span.j_begin)) * grid.inner * grid.rows_per_block * 4;
    const int64_t group_block_rows = std::max<int64_t>(1, kReadGroupBytes / band_bytes);
    const int64_t dst_row_elems = row_elements(wanted);
    std::future<void> pending;  // declared after `bounce` (a member): never outlives it
    size_t which = 0;
    for (const Run& row_run : row_runs) {
      for (int64_t i0 = row_run.begin; i0 < row_run.end; i0 += group_block_rows) {
        const int64_t i1 = std::min(row_run.end, i0 + group_block_rows);
        for (const Run& cols : col_runs) {
          const bool direct = row_run.inside && cols.inside;
          Rect local{std::vector<int64_t>(rank, 0), src.rect.count};  // the piece, in src's coordinates
          local.offset[0] = grid.row_begin(i0);
          local.count[0] = grid.row_end(i1 - 1) - local.offset[0];
          if (rank > 1) {
            local.offset[1] = grid.col_begin(cols.begin);
            local.count[1] = grid.col_end(cols.end - 1) - local.offset[1];
          }
          Rect piece = local;  // in the tensor's coordinates
          for (size_t d = 0; d < rank; ++d) piece.offset[d] += src.rect.offset[d];
          // Where the piece goes: dst when direct, else a buffer row-major over the piece.
          float* first = nullptr;  // the piece's first element there
          int64_t stride = 0;      // elements from one of its rows to the next there
          std::vector<int64_t> to_dims = piece.count, to_at(rank, 0);
          float* to = nullptr;
          if (direct) {
            int64_t linear = 0;
            for (size_t d = 0; d < rank; ++d) {
              to_at[d] = piece.offset[d] - wanted.offset[d];
              linear = linear * wanted.count[d] + to_at[d];
            }
            to = dst;
            to_dims = wanted.count;
            first = dst + linear;
            stride = dst_row_elems;
          } else {
            std::vector<float>& b = bounce[which];
            which ^= 1;
            b.resize(static_cast<size_t>(element_count(piece)));
            to = first = b.data();
            stride = row_elements(piece);
          }
          read_piece(ds.get(), storage, src, grid, local, to, to_dims, to_at, f);
          bytes_read += element_count(piece) * 4;
          if (pending.valid()) pending.get();  // rethrows a mismatch found in the previous piece
          pending = std::async(
              std::launch::async,
              [&info, &src, &region, &wanted, &f, &grid, first, stride, piece, local, direct, i0, i1, cols, dst] {
                const int64_t piece_row_elems = row_elements(piece);
                for (int64_t i = i0; i < i1; ++i) {
                  const int64_t row = grid.row_begin(i) - local.offset[0];  // in the piece
                  const int64_t rows = grid.row_end(i) - grid.row_begin(i);
                  const int64_t block_elems = grid.cols_per_block * grid.inner;
                  const std::vector<uint64_t> got =
                      band_hashes(first + row * stride, rows, piece_row_elems, stride, block_elems);
                  for (int64_t j = cols.begin; j < cols.end; ++j) {
                    const uint64_t want = src.block_hashes[static_cast<size_t>(i * grid.block_cols() + j)];
                    const uint64_t h = got[static_cast<size_t>(j - cols.begin)];
                    if (h != want) throw mismatch(info, src, f, grid, i, j, want, h);
                  }
                }
                if (!direct) copy_region(first, piece, dst, wanted, *intersect(piece, region));
              });
        }
      }
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

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

const fs::path& CheckpointReader::step_dir() const { return impl_->dir; }
int64_t CheckpointReader::step() const { return impl_->index.step; }
int64_t CheckpointReader::format_version() const { return impl_->index.format_version; }
const std::string& CheckpointReader::save_token() const { return impl_->index.save_token; }
const Metadata& CheckpointReader::metadata() const { return impl_->index.metadata; }
const std::vector<TensorInfo>& CheckpointReader::tensors() const { return impl_->index.tensors; }
const std::vector<ShardInfo>& CheckpointReader::shards() const { return impl_->index.shards; }
int64_t CheckpointReader::bytes_read() const { return impl_->bytes_read; }

const TensorInfo& CheckpointReader::tensor(const std::string& name) const {
  return find_tensor(impl_->index.tensors, name, impl_->dir.string());
}

bool CheckpointReader::has(const std::string& name) const {
  const std::vector<TensorInfo>& all = impl_->index.tensors;
  return std::any_of(all.begin(), all.end(), [&](const TensorInfo& t) { return t.name == name; });
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
  // Ranks of a new layout that split a stored rectangle between them would all read it first,
  // together, and the other sources after: fewer files read at once. Starting each request
  // at the source its own position picks (its index along every dimension, summed) spreads
  // them over the files.
  size_t start = 0;
  for (size_t d = 0; d < wanted.offset.size(); ++d) start += static_cast<size_t>(wanted.offset[d] / wanted.count[d]);
  for (size_t k = 0; k < ops.size(); ++k) {
    const CopyOp& op = ops[(start + k) % ops.size()];
    const StoredRect& src = info.sources[op.source];
    if (options.verify) {
      impl_->read_verified(info, src, op.region, wanted, dst);
    } else {
      impl_->read_unverified(src, op.region, wanted, dst);
    }
  }
}

}  // namespace axonn
