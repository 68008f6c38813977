#include "checkpoint/checksum.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <new>

#include "checkpoint/reshard.hpp"

namespace axonn {

uint64_t xxh3_64(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

uint64_t xxh3_64_rows(const float* first, int64_t rows, int64_t row_elems, int64_t stride_elems) {
  const size_t row_bytes = static_cast<size_t>(row_elems) * sizeof(float);
  if (stride_elems == row_elems) return XXH3_64bits(first, static_cast<size_t>(rows) * row_bytes);
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  for (int64_t r = 0; r < rows; ++r) XXH3_64bits_update(state, first + r * stride_elems, row_bytes);
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

uint64_t combine_hashes(const std::vector<uint64_t>& hashes) {
  std::vector<unsigned char> bytes(hashes.size() * 8);
  for (size_t i = 0; i < hashes.size(); ++i) {
    for (size_t b = 0; b < 8; ++b) bytes[i * 8 + b] = static_cast<unsigned char>(hashes[i] >> (8 * b));
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

int64_t checksum_rows_per_block(const Rect& rect) {
  const int64_t row_bytes = row_elements(rect) * static_cast<int64_t>(sizeof(float));
  return std::max<int64_t>(1, kChecksumBlockBytes / row_bytes);
}

int64_t checksum_block_count(int64_t rows, int64_t rows_per_block) {
  return (rows + rows_per_block - 1) / rows_per_block;
}

std::vector<uint64_t> block_hashes(const float* data, const Rect& rect, int64_t rows_per_block) {
  const int64_t rows = rect.count[0];
  const size_t row_bytes = static_cast<size_t>(row_elements(rect)) * sizeof(float);
  std::vector<uint64_t> hashes;
  hashes.reserve(static_cast<size_t>(checksum_block_count(rows, rows_per_block)));
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  for (int64_t r = 0; r < rows; r += rows_per_block) {
    const int64_t n = std::min(rows_per_block, rows - r);
    hashes.push_back(XXH3_64bits(bytes + static_cast<size_t>(r) * row_bytes, static_cast<size_t>(n) * row_bytes));
  }
  return hashes;
}

std::string hex64(uint64_t value) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace axonn
