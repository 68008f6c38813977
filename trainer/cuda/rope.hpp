#pragma once
// Rotary position embedding (RoPE), Meta's Llama convention (Backend::rope_forward): in place
// on a (B, T, heads, d) view with row stride ld, the pairs (2i, 2i + 1) of each head rotated
// by θ_{t,i} from the float32 table cos_sin (T, d/2, 2). One thread per pair; the other
// columns of a row are not touched.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

// Activations of either storage type (act_storage.cuh), rotated in float, rounded once.
void rope_forward(const Context& ctx, ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                  int64_t ld);
// the transpose: rotation by −θ
void rope_backward(const Context& ctx, ActPtr dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                   int64_t ld);

}  // namespace axonn::cuda
