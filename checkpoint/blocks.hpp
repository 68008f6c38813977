#pragma once
// The checksum blocks of a stored rectangle, pure geometry (README.md, "Checksums"): a grid of
// tiles, rows_per_block dimension-0 rows by cols_per_block dimension-1 columns (and all of the
// dimensions after 1), the last row and the last column of tiles shorter, numbered row-major
// over the grid. Tiles, not whole rows, so that a reader wanting some columns of a rectangle
// reads and verifies only the tiles holding them. Format version 1 hashed whole-row blocks:
// the same grid with cols_per_block = all the columns.
#include <cstdint>
#include <vector>

#include "checkpoint/rect.hpp"

namespace axonn {

inline constexpr int64_t kChecksumBlockBytes = int64_t{4} << 20;  // a block holds at most about this
// A block's row is at least this long (unless the rectangle's row is shorter): narrower
// tiles would make every read and hash a train of tiny runs.
inline constexpr int64_t kMinBlockRowBytes = int64_t{1} << 10;

// a / b rounded up, for a >= 0 and b >= 1, without forming a + b - 1: that overflows for the
// block extents a damaged index may hold.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

struct BlockGrid {
  int64_t rows = 1;   // dimension-0 extent of the rectangle
  int64_t cols = 1;   // dimension-1 extent (1 for a 1-D rectangle)
  int64_t inner = 1;  // elements per (row, column): product of the extents after dimension 1
  int64_t rows_per_block = 1;
  int64_t cols_per_block = 1;

  int64_t block_rows() const { return ceil_div(rows, rows_per_block); }
  int64_t block_cols() const { return ceil_div(cols, cols_per_block); }
  int64_t count() const { return block_rows() * block_cols(); }
  // Rows [row_begin(i), row_end(i)) of block row i and columns [col_begin(j), col_end(j)) of
  // block column j, local to the rectangle.
  int64_t row_begin(int64_t i) const { return i * rows_per_block; }
  int64_t row_end(int64_t i) const;
  int64_t col_begin(int64_t j) const { return j * cols_per_block; }
  int64_t col_end(int64_t j) const;
  // Elements of one row of the rectangle, and of one row of block column j.
  int64_t row_elements() const { return cols * inner; }
  int64_t block_row_elements(int64_t j) const { return (col_end(j) - col_begin(j)) * inner; }
};

// The grid of `rect` (extents from rect.count); std::invalid_argument unless both block
// extents are at least 1.
BlockGrid block_grid(const Rect& rect, int64_t rows_per_block, int64_t cols_per_block);

// How this build's writer cuts a rectangle (format versions 2 and 3): into the smallest power of two
// of blocks that keeps each at most kChecksumBlockBytes, split as evenly as powers of two go
// between columns and rows (columns get the larger half: 8 blocks are 2 rows x 4 columns of
// blocks), fewer columns where a block's row would fall under kMinBlockRowBytes. A new layout
// that splits a stored rectangle's rows or columns into up to that many equal parts therefore
// reads whole blocks only.
BlockGrid choose_block_grid(const Rect& rect);

// Format version 3 stores each tile as one HDF5 chunk, so a tile's bytes lie together in the
// file. The chunk shape: [rows_per_block] for a 1-D rectangle, else [rows_per_block,
// cols_per_block, then the rectangle's extents after dimension 1]. Edge tiles are stored as
// whole chunks, padded.
std::vector<int64_t> tile_chunk_shape(const BlockGrid& grid, const Rect& rect);
// Tile (i, j)'s first element, local to the rectangle: [row_begin(i), col_begin(j), 0, ...]
// (`dims` entries).
std::vector<int64_t> tile_origin(const BlockGrid& grid, size_t dims, int64_t i, int64_t j);

// Blocks [i_begin, i_end) x [j_begin, j_end): the ones a region touches.
struct BlockSpan {
  int64_t i_begin = 0, i_end = 0;
  int64_t j_begin = 0, j_end = 0;
};
// `region` in the coordinates of `stored` (global), inside it.
BlockSpan blocks_touched(const BlockGrid& grid, const Rect& stored, const Rect& region);
// Elements in the blocks of `span` (what a verified read of them reads).
int64_t span_elements(const BlockGrid& grid, const BlockSpan& span);

}  // namespace axonn
