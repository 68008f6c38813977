#pragma once
// Checksums: xxHash XXH3-64 (seed 0). A stored rectangle is hashed in row blocks (runs of
// whole dimension-0 rows, about kChecksumBlockBytes each) so a reader that needs only some
// rows verifies only the blocks it reads. Derived checksums (README.md, "Checksums"):
//   block hash   = XXH3-64(raw little-endian float32 bytes of the block)
//   dataset hash = combine(block hashes)
//   shard hash   = combine(dataset hashes, in dataset order)
// where combine(h...) = XXH3-64 of the hashes as consecutive little-endian uint64.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/rect.hpp"

namespace axonn {

inline constexpr int64_t kChecksumBlockBytes = int64_t{4} << 20;

uint64_t xxh3_64(const void* data, size_t bytes);
// XXH3-64 of `rows` runs of `row_elems` floats, `stride_elems` apart (streaming): equal to
// xxh3_64 over the same runs laid end to end, so a block can be verified where HDF5 placed
// it inside a wider destination.
uint64_t xxh3_64_rows(const float* first, int64_t rows, int64_t row_elems, int64_t stride_elems);
uint64_t combine_hashes(const std::vector<uint64_t>& hashes);
// Rows per checksum block for a rectangle: max(1, kChecksumBlockBytes / bytes per row).
int64_t checksum_rows_per_block(const Rect& rect);
// Number of blocks of a rectangle with `rows` rows.
int64_t checksum_block_count(int64_t rows, int64_t rows_per_block);
// Hashes of the blocks of `data` (row-major over `rect`, all its rows).
std::vector<uint64_t> block_hashes(const float* data, const Rect& rect, int64_t rows_per_block);
// "0x0123456789abcdef"
std::string hex64(uint64_t value);

}  // namespace axonn
