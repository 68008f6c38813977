#pragma once
// Checksums: xxHash XXH3-64 (seed 0) of the checksum blocks of a stored rectangle (tiles of
// rows x columns, blocks.hpp), so a reader verifies only the blocks it reads. Derived
// checksums (README.md, "Checksums"):
//   block hash   = XXH3-64(the block's raw little-endian float32 bytes, its rows in order)
//   dataset hash = combine(block hashes, in block order)
//   shard hash   = combine(dataset hashes, in dataset order)
// where combine(h...) = XXH3-64 of the hashes as consecutive little-endian uint64.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/blocks.hpp"

namespace axonn {

uint64_t xxh3_64(const void* data, size_t bytes);
// XXH3-64 of `rows` runs of `row_elems` floats, `stride_elems` apart (streaming): equal to
// xxh3_64 over the same runs laid end to end, so a block can be verified where HDF5 placed
// it inside a wider destination.
uint64_t xxh3_64_rows(const float* first, int64_t rows, int64_t row_elems, int64_t stride_elems);
uint64_t combine_hashes(const std::vector<uint64_t>& hashes);

// The hashes of blocks lying side by side in one band of rows: `rows` runs of `row_elems`
// floats, `stride_elems` apart, each run cut into pieces of `block_elems` (the last one
// shorter), block k made of piece k of every run. Left to right. Walks the band once in
// memory order, one streaming state per block.
std::vector<uint64_t> band_hashes(const float* first, int64_t rows, int64_t row_elems, int64_t stride_elems,
                                  int64_t block_elems);
// Hashes of every block of `grid`, in block order; `data` is the whole rectangle, row-major.
std::vector<uint64_t> block_hashes(const float* data, const BlockGrid& grid);
// "0x0123456789abcdef"
std::string hex64(uint64_t value);

}  // namespace axonn
