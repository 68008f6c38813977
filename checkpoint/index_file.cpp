#include "checkpoint/index_file.hpp"

#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/shard_meta.hpp"
#include "checkpoint/step_dir.hpp"

namespace axonn {
namespace {

// The elements of every tensor of an index together (256 Pi float32s): their bytes, and any
// sum of them, fit an int64_t with room to spare.
constexpr int kMaxTensorElementsLog2 = 56;
constexpr int64_t kMaxTensorElements = int64_t{1} << kMaxTensorElementsLog2;

void write_metadata(const h5::Attrs& root, const Metadata& m) {
  root.set_str(format::kAttrLayout, m.layout);
  root.set_str(format::kAttrModelConfig, m.model_config);
  root.set_i64(format::kAttrDataCursor, m.data_cursor);
  root.set_u8s(format::kAttrRngState, m.rng_state);
  for (const auto& [k, v] : m.ints) root.set_i64(format::kMetaIntPrefix + k, v);
  for (const auto& [k, v] : m.reals) root.set_f64(format::kMetaRealPrefix + k, v);
  for (const auto& [k, v] : m.strings) root.set_str(format::kMetaStrPrefix + k, v);
}

Metadata read_metadata(const h5::Attrs& root) {
  Metadata m;
  m.layout = root.get_str(format::kAttrLayout);
  m.model_config = root.get_str(format::kAttrModelConfig);
  m.data_cursor = root.get_i64(format::kAttrDataCursor);
  m.rng_state = root.get_u8s(format::kAttrRngState);
  auto strip = [](const std::string& name, const std::string& prefix) -> std::optional<std::string> {
    if (name.rfind(prefix, 0) != 0) return std::nullopt;
    return name.substr(prefix.size());
  };
  for (const std::string& name : root.names()) {
    if (auto k = strip(name, format::kMetaIntPrefix)) m.ints[*k] = root.get_i64(name);
    if (auto k = strip(name, format::kMetaRealPrefix)) m.reals[*k] = root.get_f64(name);
    if (auto k = strip(name, format::kMetaStrPrefix)) m.strings[*k] = root.get_str(name);
  }
  return m;
}

void write_tensor(h5::Id file, const TensorInfo& t, const std::string& f) {
  std::vector<h5::VirtualSource> vds;
  std::vector<int64_t> ranks, offsets, counts, rows_per_block, cols_per_block;
  std::vector<std::string> datasets;
  std::vector<uint64_t> hashes, blocks;
  for (const StoredRect& s : t.sources) {
    vds.push_back(h5::VirtualSource{s.file, s.dataset, s.rect});
    ranks.push_back(s.rank);
    datasets.push_back(s.dataset);
    offsets.insert(offsets.end(), s.rect.offset.begin(), s.rect.offset.end());
    counts.insert(counts.end(), s.rect.count.begin(), s.rect.count.end());
    rows_per_block.push_back(s.rows_per_block);
    cols_per_block.push_back(s.cols_per_block);
    hashes.push_back(s.xxh3);
    blocks.insert(blocks.end(), s.block_hashes.begin(), s.block_hashes.end());
  }
  h5::Handle ds = h5::create_virtual_f32(file, t.name, t.global_shape, vds, f);
  const h5::Attrs a(ds.get(), f);
  const std::vector<int64_t> table_dims = {static_cast<int64_t>(t.sources.size()),
                                           static_cast<int64_t>(t.global_shape.size())};
  a.set_i64s(format::kAttrSourceRank, ranks);
  a.set_strs(format::kAttrSourceDataset, datasets);
  a.set_i64s(format::kAttrSourceOffset, offsets, table_dims);
  a.set_i64s(format::kAttrSourceCount, counts, table_dims);
  a.set_i64s(format::kAttrSourceRowsPerBlock, rows_per_block);
  a.set_i64s(format::kAttrSourceColsPerBlock, cols_per_block);
  a.set_u64s(format::kAttrSourceXxh3, hashes);
  a.set_u64s(format::kAttrSourceBlockHashes, blocks);
  ds.close(f, "close dataset " + t.name);
}

TensorInfo read_tensor(h5::Id file, const std::string& name, const std::string& f, int64_t version) {
  h5::Handle ds = h5::open_dataset(file, name, f);
  const h5::Attrs a(ds.get(), f);
  TensorInfo t;
  t.name = name;
  t.global_shape = h5::dataset_dims(ds.get(), f);
  const auto ranks = a.get_i64s(format::kAttrSourceRank);
  const auto datasets = a.get_strs(format::kAttrSourceDataset);
  const auto offsets = a.get_i64s(format::kAttrSourceOffset);
  const auto counts = a.get_i64s(format::kAttrSourceCount);
  const auto rows_per_block = a.get_i64s(format::kAttrSourceRowsPerBlock);
  // Version 1 has whole-row blocks and no column attribute (filled in per source below).
  const auto cols_per_block = version >= 2 ? a.get_i64s(format::kAttrSourceColsPerBlock) : std::vector<int64_t>{};
  const auto hashes = a.get_u64s(format::kAttrSourceXxh3);
  const auto blocks = a.get_u64s(format::kAttrSourceBlockHashes);
  const size_t n = ranks.size(), r = t.global_shape.size();
  auto corrupt = [&](const std::string& why) {
    throw FormatError(f, "read index", f + ": tensor '" + name + "': " + why + "; the index is corrupt");
  };
  if (datasets.size() != n || offsets.size() != n * r || counts.size() != n * r || rows_per_block.size() != n ||
      (version >= 2 && cols_per_block.size() != n) || hashes.size() != n) {
    corrupt("source attributes disagree in length");
  }
  // Sizes in bytes (TensorInfo::bytes, the read plan's sums) must fit an int64_t.
  int64_t elements = 1;
  for (int64_t extent : t.global_shape) {
    if (extent < 1 || elements > kMaxTensorElements / extent)
      corrupt("global shape " + shape_string(t.global_shape) + " is empty in some dimension or holds more than 2^" +
              std::to_string(kMaxTensorElementsLog2) + " elements");
    elements *= extent;
  }
  size_t next_block = 0;
  for (size_t i = 0; i < n; ++i) {
    StoredRect s;
    s.rank = static_cast<int>(ranks[i]);
    s.file = shard_file_name(s.rank);
    s.dataset = datasets[i];
    s.rect.offset.assign(offsets.begin() + static_cast<std::ptrdiff_t>(i * r),
                         offsets.begin() + static_cast<std::ptrdiff_t>((i + 1) * r));
    s.rect.count.assign(counts.begin() + static_cast<std::ptrdiff_t>(i * r),
                        counts.begin() + static_cast<std::ptrdiff_t>((i + 1) * r));
    try {
      validate_rect(t.global_shape, s.rect, "tensor '" + name + "'");
    } catch (const std::invalid_argument& e) {
      corrupt(e.what());
    }
    s.rows_per_block = rows_per_block[i];
    s.cols_per_block = version >= 2 ? cols_per_block[i] : block_grid(s.rect, 1, 1).cols;
    if (s.rows_per_block < 1 || s.cols_per_block < 1) corrupt("a checksum block extent is below 1");
    const size_t nblocks = static_cast<size_t>(s.blocks().count());
    if (next_block + nblocks > blocks.size()) corrupt("too few block hashes");
    s.block_hashes.assign(blocks.begin() + static_cast<std::ptrdiff_t>(next_block),
                          blocks.begin() + static_cast<std::ptrdiff_t>(next_block + nblocks));
    next_block += nblocks;
    s.xxh3 = hashes[i];
    if (combine_hashes(s.block_hashes) != s.xxh3) corrupt("block hashes do not combine to the rectangle's hash");
    t.sources.push_back(std::move(s));
  }
  if (next_block != blocks.size()) corrupt("too many block hashes");
  // Every element stored exactly once (TensorInfo::sources), so every read plans and reads.
  std::vector<Rect> rects;
  for (const StoredRect& s : t.sources) rects.push_back(s.rect);
  if (const auto pair = find_overlap(rects))
    corrupt("stored rectangles " + rect_string(rects[pair->first]) + " and " + rect_string(rects[pair->second]) +
            " overlap");
  int64_t stored = 0;  // disjoint and inside the shape: at most `elements`
  for (const Rect& rect : rects) stored += element_count(rect);
  if (stored != elements)
    corrupt("its stored rectangles hold " + std::to_string(stored) + " of its " + std::to_string(elements) +
            " elements");
  return t;
}

// Disk to reserve for the index (see reserve_file_space): generous per tensor and per
// stored rectangle (its VDS mapping and attribute rows); the unused part is cut off.
int64_t reservation(const IndexContents& c) {
  int64_t bytes =
      (int64_t{1} << 20) + static_cast<int64_t>(c.metadata.model_config.size() + c.metadata.rng_state.size());
  for (const auto& [k, v] : c.metadata.strings) bytes += static_cast<int64_t>(k.size() + v.size()) + 256;
  bytes += static_cast<int64_t>(c.metadata.ints.size() + c.metadata.reals.size()) * 256;
  bytes += static_cast<int64_t>(c.shards.size()) * 256;
  for (const TensorInfo& t : c.tensors) {
    bytes += (16 << 10) + 2 * static_cast<int64_t>(t.name.size());
    for (const StoredRect& s : t.sources) {
      bytes += 512 + 48 * static_cast<int64_t>(t.global_shape.size()) +
               8 * static_cast<int64_t>(s.block_hashes.size()) +
               2 * static_cast<int64_t>(s.file.size() + s.dataset.size());
    }
  }
  return bytes;
}

}  // namespace

void write_index(const std::filesystem::path& path, const IndexContents& c) {
  const std::string f = path.string();
  h5::Handle file = h5::create_file(path);
  h5::reserve_file_space(file.get(), reservation(c), f);
  const h5::Attrs root(file.get(), f);
  root.set_str(format::kAttrMagic, format::kMagic);
  root.set_i64(format::kAttrVersion, format::kVersion);
  root.set_str(format::kAttrKind, "index");
  root.set_i64(format::kAttrStep, c.step);
  root.set_str(format::kAttrSaveToken, c.save_token);
  root.set_str(format::kAttrChecksumAlgorithm, format::kChecksumAlgorithm);
  write_metadata(root, c.metadata);
  std::vector<std::string> names;
  for (const TensorInfo& t : c.tensors) names.push_back(t.name);
  root.set_strs(format::kAttrTensorNames, names);
  std::vector<int64_t> ranks, bytes;
  std::vector<std::string> files;
  std::vector<uint64_t> checksums;
  for (const ShardInfo& s : c.shards) {
    ranks.push_back(s.rank);
    files.push_back(s.file);
    checksums.push_back(s.checksum);
    bytes.push_back(s.data_bytes);
  }
  root.set_i64s(format::kAttrShardRanks, ranks);
  root.set_strs(format::kAttrShardFiles, files);
  root.set_u64s(format::kAttrShardChecksums, checksums);
  root.set_i64s(format::kAttrShardBytes, bytes);
  for (const TensorInfo& t : c.tensors) write_tensor(file.get(), t, f);
  h5::close_reserved_file(file, f);
  fsync_file(path);
}

IndexContents read_index(const std::filesystem::path& path) {
  const h5::Handle file = h5::open_file_readonly(path);
  return read_index(file.get(), path.string());
}

IndexContents read_index(h5::Id file, const std::string& f) {
  const h5::Attrs root(file, f);
  IndexContents c;
  c.format_version = check_header(root, f, "index");
  c.step = root.get_i64(format::kAttrStep);
  c.save_token = root.get_str(format::kAttrSaveToken);
  c.metadata = read_metadata(root);
  std::set<std::string> listed;
  int64_t elements = 0;  // of every tensor: each at most kMaxTensorElements, so the sum cannot overflow
  for (const std::string& name : root.get_strs(format::kAttrTensorNames)) {
    if (!listed.insert(name).second)
      throw FormatError(f, "read index", f + ": tensor '" + name + "' is listed twice; the index is corrupt");
    c.tensors.push_back(read_tensor(file, name, f, c.format_version));
    elements += element_count(c.tensors.back().global_shape);
    if (elements > kMaxTensorElements)
      throw FormatError(f, "read index",
                        f + ": its tensors hold more than 2^" + std::to_string(kMaxTensorElementsLog2) +
                            " elements in all; the index is corrupt");
  }
  const auto ranks = root.get_i64s(format::kAttrShardRanks);
  const auto files = root.get_strs(format::kAttrShardFiles);
  const auto checksums = root.get_u64s(format::kAttrShardChecksums);
  const auto bytes = root.get_i64s(format::kAttrShardBytes);
  if (files.size() != ranks.size() || checksums.size() != ranks.size() || bytes.size() != ranks.size()) {
    throw FormatError(f, "read index", f + ": shard attributes disagree in length; the index is corrupt");
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    ShardInfo s;
    s.rank = static_cast<int>(ranks[i]);
    s.file = files[i];
    s.checksum = checksums[i];
    s.data_bytes = bytes[i];
    c.shards.push_back(std::move(s));
  }
  std::map<int, int64_t> datasets_per_rank;
  for (const TensorInfo& t : c.tensors) {
    for (const StoredRect& r : t.sources) ++datasets_per_rank[r.rank];
  }
  for (ShardInfo& s : c.shards) s.datasets = datasets_per_rank[s.rank];
  return c;
}

}  // namespace axonn
