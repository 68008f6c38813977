#include "checkpoint/blocks.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace axonn {

int64_t BlockGrid::row_end(int64_t i) const { return std::min(rows, (i + 1) * rows_per_block); }
int64_t BlockGrid::col_end(int64_t j) const { return std::min(cols, (j + 1) * cols_per_block); }

BlockGrid block_grid(const Rect& rect, int64_t rows_per_block, int64_t cols_per_block) {
  if (rows_per_block < 1 || cols_per_block < 1) {
    throw std::invalid_argument("checksum blocks of " + std::to_string(rows_per_block) + " rows x " +
                                std::to_string(cols_per_block) + " columns: both must be at least 1");
  }
  BlockGrid g;
  g.rows = rect.count.at(0);
  g.cols = rect.count.size() > 1 ? rect.count[1] : 1;
  for (size_t d = 2; d < rect.count.size(); ++d) g.inner *= rect.count[d];
  g.rows_per_block = rows_per_block;
  g.cols_per_block = cols_per_block;
  return g;
}

BlockGrid choose_block_grid(const Rect& rect) {
  const BlockGrid extents = block_grid(rect, 1, 1);
  const int64_t bytes = element_count(rect) * 4;
  int64_t blocks = 1;
  while (bytes > blocks * kChecksumBlockBytes) blocks *= 2;
  // Column parts: 2^ceil(log2(blocks) / 2).
  int64_t col_parts = 1;
  for (int64_t left = blocks; left > 1; left /= 4) col_parts *= 2;
  auto block_row_bytes = [&](int64_t parts) { return (extents.cols + parts - 1) / parts * extents.inner * 4; };
  while (col_parts > 1 && (col_parts > extents.cols || block_row_bytes(col_parts) < kMinBlockRowBytes)) col_parts /= 2;
  const int64_t row_parts = std::min(extents.rows, blocks / col_parts);
  return block_grid(rect, (extents.rows + row_parts - 1) / row_parts, (extents.cols + col_parts - 1) / col_parts);
}

std::vector<int64_t> tile_chunk_shape(const BlockGrid& grid, const Rect& rect) {
  std::vector<int64_t> shape = rect.count;
  shape.at(0) = grid.rows_per_block;
  if (shape.size() > 1) shape[1] = grid.cols_per_block;
  return shape;
}

std::vector<int64_t> tile_origin(const BlockGrid& grid, size_t dims, int64_t i, int64_t j) {
  std::vector<int64_t> origin(dims, 0);
  origin.at(0) = grid.row_begin(i);
  if (dims > 1) origin[1] = grid.col_begin(j);
  return origin;
}

BlockSpan blocks_touched(const BlockGrid& grid, const Rect& stored, const Rect& region) {
  const int64_t r0 = region.offset[0] - stored.offset[0];
  const int64_t r1 = r0 + region.count[0];
  const int64_t c0 = region.offset.size() > 1 ? region.offset[1] - stored.offset[1] : 0;
  const int64_t c1 = c0 + (region.count.size() > 1 ? region.count[1] : 1);
  return BlockSpan{r0 / grid.rows_per_block, ceil_div(r1, grid.rows_per_block), c0 / grid.cols_per_block,
                   ceil_div(c1, grid.cols_per_block)};
}

int64_t span_elements(const BlockGrid& grid, const BlockSpan& span) {
  if (span.i_begin >= span.i_end || span.j_begin >= span.j_end) return 0;
  const int64_t rows = grid.row_end(span.i_end - 1) - grid.row_begin(span.i_begin);
  const int64_t cols = grid.col_end(span.j_end - 1) - grid.col_begin(span.j_begin);
  return rows * cols * grid.inner;
}

}  // namespace axonn
