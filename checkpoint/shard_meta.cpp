#include "checkpoint/shard_meta.hpp"

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"

namespace axonn {

int64_t ShardMeta::data_bytes() const {
  int64_t bytes = 0;
  for (const ShardSlice& s : slices) bytes += element_count(s.rect) * 4;
  return bytes;
}

namespace {

// "1 and 2": the versions check_header accepts, for its message.
std::string readable_versions() {
  std::string out;
  for (int64_t v = format::kOldestReadableVersion; v <= format::kVersion; ++v) {
    out += (v == format::kOldestReadableVersion ? "" : v == format::kVersion ? " and " : ", ") + std::to_string(v);
  }
  return out;
}

}  // namespace

int64_t check_header(const h5::Attrs& root, const std::string& file, const std::string& expected_kind) {
  const std::string magic = root.has(format::kAttrMagic) ? root.get_str(format::kAttrMagic) : "";
  if (magic != format::kMagic) {
    throw FormatError(
        file, "check magic",
        file + " is not an axonn checkpoint file: magic '" + magic + "', expected '" + format::kMagic + "'");
  }
  const int64_t version = root.get_i64(format::kAttrVersion);
  if (version < format::kOldestReadableVersion || version > format::kVersion) {
    throw FormatError(file, "check version",
                      file + " has checkpoint format version " + std::to_string(version) +
                          "; this build reads versions " + readable_versions() +
                          " only: load it with the axonn build that wrote it");
  }
  const std::string kind = root.get_str(format::kAttrKind);
  if (kind != expected_kind) {
    throw FormatError(file, "check kind",
                      file + " is a checkpoint '" + kind + "' file, expected '" + expected_kind + "'");
  }
  return version;
}

ShardMeta read_shard_meta(const std::filesystem::path& path) {
  const std::string f = path.string();
  h5::Handle file = h5::open_file_readonly(path);
  const h5::Attrs root(file.get(), f);
  ShardMeta meta;
  meta.format_version = check_header(root, f, "shard");
  meta.rank = static_cast<int>(root.get_i64(format::kAttrRank));
  meta.step = root.get_i64(format::kAttrStep);
  meta.save_token = root.get_str(format::kAttrSaveToken);
  meta.checksum = root.get_u64(format::kAttrShardChecksum);
  const int64_t count = root.get_i64(format::kAttrSliceCount);
  std::vector<uint64_t> dataset_hashes;
  for (int64_t i = 0; i < count; ++i) {
    char name[40];
    std::snprintf(name, sizeof name, "%s%05lld", format::kSlicePrefix, static_cast<long long>(i));
    h5::Handle ds = h5::open_dataset(file.get(), name, f);
    const h5::Attrs a(ds.get(), f);
    ShardSlice s;
    s.dataset = name;
    s.tensor = a.get_str(format::kAttrTensor);
    s.global_shape = a.get_i64s(format::kAttrGlobalShape);
    s.rect = Rect{a.get_i64s(format::kAttrOffset), h5::dataset_dims(ds.get(), f)};
    s.rows_per_block = a.get_i64(format::kAttrRowsPerBlock);
    s.block_hashes = a.get_u64s(format::kAttrBlockHashes);
    s.xxh3 = a.get_u64(format::kAttrXxh3);
    const std::string where = f + " " + name + " (tensor '" + s.tensor + "')";
    try {
      validate_rect(s.global_shape, s.rect, "tensor '" + s.tensor + "'");
    } catch (const std::invalid_argument& e) {
      throw FormatError(f, "read shard metadata", where + ": " + e.what());
    }
    // Version 1 blocks are whole rows.
    s.cols_per_block = meta.format_version >= 2 ? a.get_i64(format::kAttrColsPerBlock) : block_grid(s.rect, 1, 1).cols;
    if (s.rows_per_block < 1 || s.cols_per_block < 1 ||
        static_cast<int64_t>(s.block_hashes.size()) != block_grid(s.rect, s.rows_per_block, s.cols_per_block).count() ||
        combine_hashes(s.block_hashes) != s.xxh3) {
      throw FormatError(f, "read shard metadata",
                        where + ": checksum attributes are inconsistent (" + std::to_string(s.block_hashes.size()) +
                            " block hashes for " + rect_string(s.rect) + " in blocks of " +
                            std::to_string(s.rows_per_block) + " rows x " + std::to_string(s.cols_per_block) +
                            " columns); the shard is corrupt");
    }
    dataset_hashes.push_back(s.xxh3);
    meta.slices.push_back(std::move(s));
  }
  if (combine_hashes(dataset_hashes) != meta.checksum) {
    throw FormatError(f, "read shard metadata",
                      f + ": shard checksum " + hex64(meta.checksum) + " is not the combination of its " +
                          std::to_string(count) + " dataset hashes; the shard is corrupt");
  }
  return meta;
}

}  // namespace axonn
