#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/rope.hpp"

namespace axonn::cuda {
namespace {

// Pair e of the B·T·heads·(d/2) pairs: token row, head, pair i within the head. sign +1
// rotates by θ, −1 by −θ (sin negated exactly, as the CPU's).
template <typename T>
__global__ void rotate_kernel(T* x, const float* cos_sin, int64_t rows, int64_t T_len, int64_t heads, int64_t half,
                              int64_t ld, float sign) {
  const int64_t per_row = heads * half, n = rows * per_row;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t row = e / per_row, r = e - row * per_row, head = r / half, i = r - head * half;
    const float* cs = cos_sin + ((row % T_len) * half + i) * 2;
    const float c = cs[0], s = sign * cs[1];
    T* p = x + row * ld + head * 2 * half + 2 * i;
    const float x0 = load(p), x1 = load(p + 1);
    store(p, x0 * c - x1 * s);
    store(p + 1, x0 * s + x1 * c);
  }
}

void rotate(const Context& ctx, const char* op, ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads,
            int64_t d, int64_t ld, float sign) {
  op_checks::require_rope_shape(op, B, T, heads, d, ld);
  const int64_t pairs = B * T * heads * (d / 2);
  if (pairs == 0) return;
  with_storage(x.type(), [&](auto t) {
    using S = decltype(t);
    rotate_kernel<S>
        <<<grid_for(pairs), kThreads, 0, ctx.stream>>>(typed<S>(x), cos_sin, B * T, T, heads, d / 2, ld, sign);
  });
  check_launch(ctx, op);
}

}  // namespace

void rope_forward(const Context& ctx, ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                  int64_t ld) {
  rotate(ctx, "rope_forward", x, cos_sin, B, T, heads, d, ld, 1.0f);
}

void rope_backward(const Context& ctx, ActPtr dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                   int64_t ld) {
  rotate(ctx, "rope_backward", dx, cos_sin, B, T, heads, d, ld, -1.0f);
}

}  // namespace axonn::cuda
