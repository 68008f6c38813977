#pragma once
// Sums into a device scalar, out[0] += Σ x or Σ x² (loss for logging, gradient norm for
// clipping). Two passes, no atomics, so the result is the same bits on every run: blocks of
// kSumChunk elements give float partial sums, then one block adds them in double.
#include <cstdint>

#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

constexpr int64_t kSumChunk = 4096;  // elements per first-pass block: 16 per thread

void sum(const Context& ctx, float* out, const float* x, int64_t n);
void sum_squares(const Context& ctx, float* out, const float* x, int64_t n);

}  // namespace axonn::cuda
