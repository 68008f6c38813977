#include "checkpoint/memory_pieces_read.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"

namespace axonn {
namespace {

constexpr const char* kOperation = "memory copy restore";

}  // namespace

MemoryShardFile::MemoryShardFile(const std::filesystem::path& path, std::string_view table_bytes,
                                 const MemoryShard& table)
    : file_(path), name_(path.string()), table_(&table) {
  const auto head_bytes = static_cast<int64_t>(table_bytes.size());
  std::string head(table_bytes.size(), '\0');
  file_.read_runs(0, 1, head_bytes, head_bytes, head.data(), head_bytes);
  if (head != table_bytes)
    throw FormatError(name_, kOperation,
                      name_ + " is not the copy of rank " + std::to_string(table.header.rank) +
                          "'s shard that the restore planned with (its header and slice table differ): the memory "
                          "copy is damaged");
  // Each slice's data follows the previous one's, after the table.
  int64_t at = head_bytes;
  for (const TensorSlice& slice : table.slices) {
    slice_at_.push_back(at);
    at += element_count(slice.rect) * 4;
  }
}

// The last dimension is a run of floats, the one before it the rows one read_runs call strides
// over (a preadv per 1024 rows), any before those an odometer.
void MemoryShardFile::read_region(size_t slice, const Rect& region, float* dst, const Rect& dst_rect) const {
  const Rect& stored = table_->slices.at(slice).rect;
  if (region.count.empty() || !contains(stored, region) || !contains(dst_rect, region))
    throw FormatError(name_, kOperation,
                      "a piece " + rect_string(region) + " of tensor '" + table_->slices[slice].name + "' in " + name_ +
                          " is not inside its stored " + rect_string(stored) + " and its destination " +
                          rect_string(dst_rect) + " (a bug: the pieces were planned against another table)");
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
    file_.read_runs(slice_at_[slice] + from * 4, rows, run * 4, file_row * 4, reinterpret_cast<char*>(dst + to),
                    dst_row * 4);
    size_t d = outer;
    while (d > 0 && ++index[d - 1] == region.count[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

void MemoryShardFile::read_pieces(std::span<const MemoryPiece> pieces, std::span<const SliceRead> reads,
                                  std::span<float* const> into) const {
  for (const MemoryPiece& p : pieces) {
    if (p.shard != table_->header.rank)
      throw FormatError(name_, kOperation,
                        "a piece of rank " + std::to_string(p.shard) + "'s shard was to be read from " + name_ +
                            ", rank " + std::to_string(table_->header.rank) + "'s (a bug)");
    read_region(p.slice, p.region, into[p.read], reads[p.read].rect);
  }
}

std::vector<char> answer_piece_request_from_files(std::span<const int64_t> request,
                                                  const std::function<const MemoryShardFile*(int shard)>& file_of,
                                                  const std::string& who) {
  const std::vector<MemoryPiece> pieces = check_piece_request(
      request,
      [&](int shard) {
        const MemoryShardFile* file = file_of(shard);
        return file != nullptr ? &file->table() : nullptr;
      },
      who);
  return answer_pieces(pieces, [&](const MemoryPiece& p, float* region) {
    file_of(p.shard)->read_region(p.slice, p.region, region, p.region);
  });
}

}  // namespace axonn
