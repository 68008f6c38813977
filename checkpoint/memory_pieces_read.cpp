#include "checkpoint/memory_pieces_read.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/raw_read.hpp"

namespace axonn {
namespace {

constexpr const char* kOperation = "memory copy restore";

// Reads `region` of a slice stored row-major over `stored` at file byte `at` into `dst`,
// row-major over `dst_rect`. The last dimension is a run of floats, the one before it the rows
// one read_runs call strides over (a preadv per 1024 rows), any before those an odometer.
void read_region(const RawFile& file, int64_t at, const Rect& stored, const Rect& region, float* dst,
                 const Rect& dst_rect) {
  const size_t n = region.count.size();
  std::vector<int64_t> file_stride(n, 1), dst_stride(n, 1);  // elements
  for (size_t d = n - 1; d > 0; --d) {
    file_stride[d - 1] = file_stride[d] * stored.count[d];
    dst_stride[d - 1] = dst_stride[d] * dst_rect.count[d];
  }
  int64_t file_base = 0, dst_base = 0;
  for (size_t d = 0; d < n; ++d) {
    file_base += (region.offset[d] - stored.offset[d]) * file_stride[d];
    dst_base += (region.offset[d] - dst_rect.offset[d]) * dst_stride[d];
  }
  const int64_t run = region.count[n - 1];
  const size_t outer = n >= 2 ? n - 2 : 0;  // the odometer's dimensions
  const int64_t rows = n >= 2 ? region.count[n - 2] : 1;
  const int64_t file_row = n >= 2 ? file_stride[n - 2] : run, dst_row = n >= 2 ? dst_stride[n - 2] : run;
  std::vector<int64_t> index(outer, 0);
  for (;;) {
    int64_t from = file_base, to = dst_base;
    for (size_t d = 0; d < outer; ++d) {
      from += index[d] * file_stride[d];
      to += index[d] * dst_stride[d];
    }
    file.read_runs(at + from * 4, rows, run * 4, file_row * 4, reinterpret_cast<char*>(dst + to), dst_row * 4);
    size_t d = outer;
    while (d > 0 && ++index[d - 1] == region.count[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

void read_memory_pieces(const std::filesystem::path& path, std::string_view table_bytes, const MemoryShard& table,
                        std::span<const MemoryPiece> pieces, std::span<const SliceRead> reads,
                        std::span<float* const> into) {
  const std::string name = path.string();
  const RawFile file(path);
  const auto head_bytes = static_cast<int64_t>(table_bytes.size());
  std::string head(table_bytes.size(), '\0');
  file.read_runs(0, 1, head_bytes, head_bytes, head.data(), head_bytes);
  if (head != table_bytes)
    throw FormatError(name, kOperation,
                      name + " is not the copy of rank " + std::to_string(table.header.rank) +
                          "'s shard that the restore planned with (its header and slice table differ): the memory "
                          "copy is damaged");
  // Each slice's data follows the previous one's, after the table.
  std::vector<int64_t> slice_at(table.slices.size());
  int64_t at = head_bytes;
  for (size_t i = 0; i < table.slices.size(); ++i) {
    slice_at[i] = at;
    at += element_count(table.slices[i].rect) * 4;
  }
  for (const MemoryPiece& p : pieces) {
    const TensorSlice& stored = table.slices.at(p.slice);
    const Rect& wanted = reads[p.read].rect;
    if (p.shard != table.header.rank || p.region.count.empty() || !contains(stored.rect, p.region) ||
        !contains(wanted, p.region))
      throw FormatError(name, kOperation,
                        "a piece " + rect_string(p.region) + " of tensor '" + stored.name + "' planned for " + name +
                            " is not inside its stored " + rect_string(stored.rect) + " and read " +
                            rect_string(wanted) + " (a bug: the pieces were planned against another table)");
    read_region(file, slice_at[p.slice], stored.rect, p.region, into[p.read], wanted);
  }
}

}  // namespace axonn
