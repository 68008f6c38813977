#pragma once
// Random op inputs for the backend tests (CPU ops, and the CUDA ops against them).
#include <cstdint>
#include <random>
#include <vector>

namespace axonn::test {

// n floats uniform in [lo, hi).
inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace axonn::test
