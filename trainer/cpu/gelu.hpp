#pragma once
// GELU, tanh approximation as in GPT-2: gelu(x) = 0.5·x·(1 + tanh(u)), u = sqrt(2/π)·(x + 0.044715·x³).
// Computed as x·σ(2u) (0.5·(1 + tanh u) = σ(2u)), which needs only exp and vectorizes.
#include <cstdint>

namespace axonn::cpu {

void gelu_forward(float* out, const float* x, int64_t n);                     // out may alias x
void gelu_backward(float* dx, const float* x, const float* dout, int64_t n);  // dx = gelu'(x)·dout, may alias dout

}  // namespace axonn::cpu
