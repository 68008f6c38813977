#pragma once
// GELU, tanh approximation (GPT-2), in the CPU backend's form x·σ(2u) = 0.5·x·(1 + tanh(u)),
// u = sqrt(2/π)·(x + 0.044715·x³): finite for every finite x (σ saturates to 0 or 1).
#include <cstdint>

#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

void gelu_forward(const Context& ctx, float* out, const float* x, int64_t n);                     // out may alias x
void gelu_backward(const Context& ctx, float* dx, const float* x, const float* dout, int64_t n);  // dx may alias dout

}  // namespace axonn::cuda
