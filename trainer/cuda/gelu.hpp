#pragma once
// GELU, tanh approximation (GPT-2), in the CPU backend's form x·σ(2u) = 0.5·x·(1 + tanh(u)),
// u = sqrt(2/π)·(x + 0.044715·x³): finite for every finite x (σ saturates to 0 or 1).
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// Activations of either storage type (act_storage.cuh), one type per call.
void gelu_forward(const Context& ctx, ActPtr out, ConstActPtr x, int64_t n);                    // out may alias x
void gelu_backward(const Context& ctx, ActPtr dx, ConstActPtr x, ConstActPtr dout, int64_t n);  // dx may alias dout

}  // namespace axonn::cuda
