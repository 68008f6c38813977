#pragma once
// GELU, tanh approximation as in GPT-2: gelu(x) = 0.5·x·(1 + tanh(u)), u = sqrt(2/π)·(x + 0.044715·x³).
// Computed as x·σ(2u) (0.5·(1 + tanh u) = σ(2u)), which needs only exp and vectorizes.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

void gelu_forward(ThreadPool& pool, float* out, const float* x, int64_t n);  // out may alias x
// dx = gelu'(x)·dout, dx may alias dout
void gelu_backward(ThreadPool& pool, float* dx, const float* x, const float* dout, int64_t n);

}  // namespace axonn::cpu
