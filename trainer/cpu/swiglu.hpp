#pragma once
// SwiGLU, Llama's MLP activation: each row of gate_up (m, 2f) is [gate (f) | up (f)] (a fused
// gate/up projection's output); out (m, f) = silu(gate)·up, silu(g) = g·σ(g). σ by the
// vectorizing exp of vec_math.hpp, as gelu.cpp. Rows are split over the pool's threads.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// out (m, f) = silu(gate)·up
void swiglu_forward(ThreadPool& pool, float* out, const float* gate_up, int64_t m, int64_t f);
// dgate_up (m, 2f) = [dout·up·silu'(gate) | dout·silu(gate)], silu'(g) = σ·(1 + g·(1 − σ));
// overwritten, overlapping none of the inputs
void swiglu_backward(ThreadPool& pool, float* dgate_up, const float* gate_up, const float* dout, int64_t m, int64_t f);

}  // namespace axonn::cpu
