#pragma once
// Elementwise sums of host buffers for the Gloo collectives: float32, and bfloat16 rounded
// after each addition. The (out, a, b, n) form is Gloo's reduce function.
#include <cstddef>
#include <cstdint>

#include "comm/bfloat16.hpp"
#include "comm/communicator.hpp"

namespace axonn {

inline void sum_float32(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<float*>(c);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

inline void sum_bfloat16(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
}

// acc[i] = acc[i] + in[i] for n elements of `type` (float32 or bfloat16).
inline void add_into(void* acc, const void* in, size_t n, ElementType type) {
  if (type == ElementType::float32)
    sum_float32(acc, acc, in, n);
  else
    sum_bfloat16(acc, acc, in, n);
}

}  // namespace axonn
