#pragma once
// Names and constants of the on-disk format (README.md is the specification). Writers and
// readers use only these, so the two cannot drift apart.
#include <cstdint>

namespace axonn::format {

inline constexpr const char* kMagic = "AXONNCKP";
// Version 3 (this build writes it): each checksum tile is one HDF5 chunk of the shard dataset,
// so a tile's bytes lie together in the file. Version 2: the same tiles (rows x columns, with
// cols_per_block / source_cols_per_block) in contiguous datasets. Version 1: blocks of whole
// rows, no column attributes, contiguous. Both still read (version 1's blocks are the tiles that
// span all columns); the attributes of versions 2 and 3 are the same.
inline constexpr int64_t kVersion = 3;
inline constexpr int64_t kOldestReadableVersion = 1;
inline constexpr const char* kChecksumAlgorithm = "XXH3-64";

// Root attributes of index.h5 and of every shard file.
inline constexpr const char* kAttrMagic = "magic";
inline constexpr const char* kAttrVersion = "format_version";
inline constexpr const char* kAttrKind = "kind";  // "index" or "shard"
inline constexpr const char* kAttrStep = "step";
inline constexpr const char* kAttrSaveToken = "save_token";
inline constexpr const char* kAttrChecksumAlgorithm = "checksum_algorithm";

// Shard root.
inline constexpr const char* kAttrRank = "rank";
inline constexpr const char* kAttrShardChecksum = "checksum";
inline constexpr const char* kAttrSliceCount = "slice_count";
// Shard datasets "/slice-00000", ... and their attributes.
inline constexpr const char* kSlicePrefix = "/slice-";
inline constexpr const char* kAttrTensor = "tensor";
inline constexpr const char* kAttrGlobalShape = "global_shape";
inline constexpr const char* kAttrOffset = "offset";
inline constexpr const char* kAttrRowsPerBlock = "rows_per_block";
inline constexpr const char* kAttrColsPerBlock = "cols_per_block";  // version 2 on
inline constexpr const char* kAttrBlockHashes = "xxh3_blocks";
inline constexpr const char* kAttrXxh3 = "xxh3";

// Index root.
inline constexpr const char* kAttrLayout = "layout";
inline constexpr const char* kAttrModelConfig = "model_config";
inline constexpr const char* kAttrDataCursor = "data_cursor";
inline constexpr const char* kAttrRngState = "rng_state";
inline constexpr const char* kAttrTensorNames = "tensor_names";
inline constexpr const char* kAttrShardRanks = "shard_ranks";
inline constexpr const char* kAttrShardFiles = "shard_files";
inline constexpr const char* kAttrShardChecksums = "shard_checksums";
inline constexpr const char* kAttrShardBytes = "shard_data_bytes";
inline constexpr const char* kMetaIntPrefix = "meta.int.";
inline constexpr const char* kMetaRealPrefix = "meta.real.";
inline constexpr const char* kMetaStrPrefix = "meta.str.";
// Index tensor (virtual dataset) attributes: one entry per stored rectangle.
inline constexpr const char* kAttrSourceRank = "source_rank";
inline constexpr const char* kAttrSourceDataset = "source_dataset";
inline constexpr const char* kAttrSourceOffset = "source_offset";  // [n, rank]
inline constexpr const char* kAttrSourceCount = "source_count";    // [n, rank]
inline constexpr const char* kAttrSourceRowsPerBlock = "source_rows_per_block";
inline constexpr const char* kAttrSourceColsPerBlock = "source_cols_per_block";  // version 2 on
inline constexpr const char* kAttrSourceXxh3 = "source_xxh3";
inline constexpr const char* kAttrSourceBlockHashes = "source_xxh3_blocks";  // all sources' blocks, concatenated

}  // namespace axonn::format
