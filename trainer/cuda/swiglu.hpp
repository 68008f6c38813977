#pragma once
// SwiGLU, Llama's MLP activation, in the CPU backend's form: each row of gate_up (m, 2f) is
// [gate (f) | up (f)]; out (m, f) = silu(gate)·up, silu(g) = g·σ(g). One thread per output
// element; σ finite for every finite g (it saturates to 0 or 1).
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// Activations of either storage type (act_storage.cuh), one type per call.
void swiglu_forward(const Context& ctx, ActPtr out, ConstActPtr gate_up, int64_t m, int64_t f);
// dgate_up (m, 2f) = [dout·up·silu'(gate) | dout·silu(gate)]; overlaps neither input
void swiglu_backward(const Context& ctx, ActPtr dgate_up, ConstActPtr gate_up, ConstActPtr dout, int64_t m, int64_t f);

}  // namespace axonn::cuda
