#include "trainer/model/init.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <numbers>
#include <thread>
#include <vector>

namespace axonn {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& name) {  // FNV-1a
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// One standard normal from the key and the element index (Box-Muller on two uniforms).
double standard_normal(uint64_t key, int64_t index) {
  const uint64_t i = static_cast<uint64_t>(index);
  const double u1 = (static_cast<double>(splitmix64(key + 2 * i) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(splitmix64(key + 2 * i + 1) >> 11) * 0x1.0p-53;      // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t tensor_key(const ParamSpec& spec, uint64_t seed) {
  return splitmix64(seed ^ splitmix64(name_hash(spec.name)));
}

}  // namespace

void init_shard(const ParamSpec& spec, const Rect& rect, uint64_t seed, float* out) {
  validate_rect(spec.shape, rect, spec.name);
  const size_t dims = spec.shape.size();
  const uint64_t key = tensor_key(spec, seed);
  // Walk the rectangle one innermost row at a time; `at` is the row's index per dimension.
  std::vector<int64_t> at(dims, 0);
  const int64_t row = rect.count[dims - 1];
  for (int64_t written = 0, total = element_count(rect); written < total; written += row) {
    int64_t global = 0;
    for (size_t d = 0; d < dims; ++d) global = global * spec.shape[d] + rect.offset[d] + at[d];
    for (int64_t j = 0; j < row; ++j) {
      float v = spec.init == ParamInit::ones ? 1.0f : 0.0f;
      if (spec.init == ParamInit::normal) v = static_cast<float>(spec.init_std * standard_normal(key, global + j));
      out[written + j] = v;
    }
    for (size_t d = dims - 1; d-- > 0;) {  // next row: odometer over the outer dimensions
      if (++at[d] < rect.count[d]) break;
      at[d] = 0;
    }
  }
}

void init_shards(const std::vector<ShardInit>& shards, uint64_t seed, int threads, int64_t piece_elements) {
  std::vector<ShardInit> pieces;
  for (const ShardInit& shard : shards) {
    validate_rect(shard.spec->shape, shard.rect, shard.spec->name);
    const int64_t rows = shard.rect.count[0], per_row = element_count(shard.rect) / rows;
    const int64_t piece_rows = std::max<int64_t>(1, piece_elements / per_row);
    for (int64_t row = 0; row < rows; row += piece_rows) {
      ShardInit piece = shard;
      piece.rect.offset[0] += row;
      piece.rect.count[0] = std::min(piece_rows, rows - row);
      piece.out += row * per_row;
      pieces.push_back(std::move(piece));
    }
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), pieces.size()));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto draw = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < pieces.size();)
        init_shard(*pieces[i].spec, pieces[i].rect, seed, pieces[i].out);
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(draw);
  draw();
  for (std::thread& helper : helpers) helper.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace axonn
