#include "checkpoint/checksum.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

namespace axonn {
namespace {

struct StateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using State = std::unique_ptr<XXH3_state_t, StateFree>;

State new_state() {
  State s(XXH3_createState());
  if (!s) throw std::bad_alloc();
  XXH3_64bits_reset(s.get());
  return s;
}

}  // namespace

uint64_t xxh3_64(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

uint64_t xxh3_64_rows(const float* first, int64_t rows, int64_t row_elems, int64_t stride_elems) {
  const size_t row_bytes = static_cast<size_t>(row_elems) * sizeof(float);
  if (stride_elems == row_elems || rows == 1) return XXH3_64bits(first, static_cast<size_t>(rows) * row_bytes);
  State state = new_state();
  for (int64_t r = 0; r < rows; ++r) XXH3_64bits_update(state.get(), first + r * stride_elems, row_bytes);
  return XXH3_64bits_digest(state.get());
}

uint64_t combine_hashes(const std::vector<uint64_t>& hashes) {
  std::vector<unsigned char> bytes(hashes.size() * 8);
  for (size_t i = 0; i < hashes.size(); ++i) {
    for (size_t b = 0; b < 8; ++b) bytes[i * 8 + b] = static_cast<unsigned char>(hashes[i] >> (8 * b));
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

namespace {

// The hashes of the blocks side by side in a band; row_at(r) gives row r (after whatever it
// has to do to make it so).
template <typename RowAt>
std::vector<uint64_t> hash_band(int64_t rows, int64_t row_elems, int64_t block_elems, RowAt row_at) {
  const int64_t blocks = (row_elems + block_elems - 1) / block_elems;
  std::vector<State> states;
  states.reserve(static_cast<size_t>(blocks));
  for (int64_t k = 0; k < blocks; ++k) states.push_back(new_state());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = row_at(r);
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t begin = k * block_elems;
      const int64_t n = std::min(block_elems, row_elems - begin);
      XXH3_64bits_update(states[static_cast<size_t>(k)].get(), row + begin, static_cast<size_t>(n) * sizeof(float));
    }
  }
  std::vector<uint64_t> hashes;
  hashes.reserve(states.size());
  for (const State& s : states) hashes.push_back(XXH3_64bits_digest(s.get()));
  return hashes;
}

}  // namespace

std::vector<uint64_t> band_hashes(const float* first, int64_t rows, int64_t row_elems, int64_t stride_elems,
                                  int64_t block_elems) {
  if (block_elems >= row_elems) return {xxh3_64_rows(first, rows, row_elems, stride_elems)};
  return hash_band(rows, row_elems, block_elems, [&](int64_t r) { return first + r * stride_elems; });
}

std::vector<uint64_t> block_hashes(const float* data, const BlockGrid& grid) {
  std::vector<uint64_t> hashes;
  hashes.reserve(static_cast<size_t>(grid.count()));
  const int64_t row_elems = grid.row_elements();
  for (int64_t i = 0; i < grid.block_rows(); ++i) {
    const std::vector<uint64_t> band =
        band_hashes(data + grid.row_begin(i) * row_elems, grid.row_end(i) - grid.row_begin(i), row_elems, row_elems,
                    grid.cols_per_block * grid.inner);
    hashes.insert(hashes.end(), band.begin(), band.end());
  }
  return hashes;
}

std::string hex64(uint64_t value) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace axonn
