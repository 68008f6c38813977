#pragma once
// Bias of a linear layer on rows with row stride ld (a column block of a wider buffer when
// ld > n, e.g. q inside a packed qkv).
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// out (m, n) += bias (n)
// out and dout: activations of either storage type (act_storage.cuh); bias float32.
void bias_forward(const Context& ctx, ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld);
// dbias (n) += Σ_rows dout (m, n), deterministic (column_sums.hpp)
void bias_backward(const Context& ctx, float* dbias, ConstActPtr dout, int64_t m, int64_t n, int64_t ld);

}  // namespace axonn::cuda
