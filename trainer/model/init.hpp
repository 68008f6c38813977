#pragma once
// Layout-independent initialization: every element of a global tensor is a function of
// (seed, tensor name, global index) only, so any layout starts from identical weights and a
// shard can be initialized without the rest of the tensor.
#include <cstdint>

#include "checkpoint/rect.hpp"
#include "trainer/model/parameters.hpp"

namespace axonn {

// out (element_count(rect), row-major over rect.count) = the initial values of `rect`. The
// value of the element at global index i (row-major over spec.shape): N(0, init_std) from a
// counter-based generator (splitmix64 of the seed, a hash of the name and i, Box-Muller), or
// the constant of ParamInit::zeros / ones.
void init_shard(const ParamSpec& spec, const Rect& rect, uint64_t seed, float* out);

}  // namespace axonn
