#pragma once
// Layout-independent initialization: every element of a global tensor is a function of
// (seed, tensor name, global index) only, so any layout starts from identical weights and a
// shard can be initialized without the rest of the tensor.
#include <cstdint>
#include <vector>

#include "checkpoint/rect.hpp"
#include "trainer/model/parameters.hpp"

namespace axonn {

// out (element_count(rect), row-major over rect.count) = the initial values of `rect`. The
// value of the element at global index i (row-major over spec.shape): N(0, init_std) from a
// counter-based generator (splitmix64 of the seed, a hash of the name and i, Box-Muller), or
// the constant of ParamInit::zeros / ones.
void init_shard(const ParamSpec& spec, const Rect& rect, uint64_t seed, float* out);

// One shard to draw and where its values go (element_count(rect) floats at out).
struct ShardInit {
  const ParamSpec* spec = nullptr;
  Rect rect;
  float* out = nullptr;
};

// Every shard's init_shard values, drawn by up to `threads` threads (0: the hardware's) in
// pieces of at most `piece_elements` (or one row of the rect's first dimension, if larger):
// a 1.5B-parameter model's draw takes about 40 s on one core. The values do not depend on the
// pieces or the thread count. Throws init_shard's error for a rect that does not fit its
// tensor.
void init_shards(const std::vector<ShardInit>& shards, uint64_t seed, int threads = 0,
                 int64_t piece_elements = int64_t{1} << 22);

}  // namespace axonn
