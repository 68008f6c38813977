#pragma once
// Rotary position embedding (RoPE), Meta's Llama convention: the element pairs (2i, 2i + 1) of
// each head are rotated by the angle θ_{t,i} of the token's position t. In place on a
// (B, T, heads, d) view with row stride ld (q or k inside a packed qkv buffer); cos_sin
// (T, d/2, 2) holds [cos θ, sin θ] (trainer/model/rope_table.hpp builds it). Rows (tokens)
// are split over the pool's threads.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// (x0, x1) <- (x0·cos − x1·sin, x0·sin + x1·cos)
void rope_forward(ThreadPool& pool, float* x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                  int64_t ld);
// the transpose, a rotation by −θ: (g0, g1) <- (g0·cos + g1·sin, −g0·sin + g1·cos)
void rope_backward(ThreadPool& pool, float* dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                   int64_t ld);

}  // namespace axonn::cpu
