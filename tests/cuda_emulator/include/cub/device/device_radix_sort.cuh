#pragma once
// cub::DeviceRadixSort::SortPairs on host memory: a stable sort of (key, value) pairs by
// key bits [begin_bit, end_bit), with cub's two-call protocol (a null temp_storage asks the
// size).
#include <algorithm>
#include <numeric>
#include <vector>

#include "cuda_runtime_api.h"

namespace cub {
struct DeviceRadixSort {
  template <typename Key, typename Value>
  static cudaError_t SortPairs(void* temp_storage, size_t& temp_bytes, const Key* keys_in, Key* keys_out,
                               const Value* values_in, Value* values_out, int n, int begin_bit = 0,
                               int end_bit = static_cast<int>(sizeof(Key) * 8), cudaStream_t = nullptr) {
    if (temp_storage == nullptr) {
      temp_bytes = 256;
      return cudaSuccess;
    }
    const Key mask = end_bit >= static_cast<int>(sizeof(Key) * 8) ? static_cast<Key>(~Key(0))
                                                                  : static_cast<Key>((Key(1) << end_bit) - 1);
    auto sort_bits = [&](int i) { return static_cast<Key>((keys_in[i] & mask) >> begin_bit); };
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return sort_bits(x) < sort_bits(y); });
    std::vector<Key> keys(order.size());
    std::vector<Value> values(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      keys[i] = keys_in[order[i]];
      values[i] = values_in[order[i]];
    }
    std::copy(keys.begin(), keys.end(), keys_out);
    std::copy(values.begin(), values.end(), values_out);
    return cudaSuccess;
  }
};
}  // namespace cub
