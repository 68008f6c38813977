#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/elementwise.hpp"

namespace axonn::cuda {
namespace {

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] *= alpha;
}

__global__ void axpy_kernel(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] += alpha * x[i];
}

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] = value;
}

template <typename T>
__global__ void convert_kernel(T* dst, const float* src, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) store(dst + i, src[i]);
}

// Element idx of the (m, n) block is row idx / n, column idx % n.
template <typename T>
__global__ void scale_matrix_kernel(T* c, int64_t ldc, int64_t m, int64_t n, float beta) {
  const int64_t total = m * n;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t i = idx / n, j = idx - i * n;
    T* e = c + i * ldc + j;
    store(e, beta == 0.0f ? 0.0f : beta * load(e));
  }
}

}  // namespace

void add(const Context& ctx, float* out, const float* a, const float* b, int64_t n) {
  require_nonnegative("add", "n", n);
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(out, a, b, n);
  check_launch(ctx, "add");
}

void scale(const Context& ctx, float* x, float alpha, int64_t n) {
  require_nonnegative("scale", "n", n);
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(x, alpha, n);
  check_launch(ctx, "scale");
}

void axpy(const Context& ctx, float* y, float alpha, const float* x, int64_t n) {
  require_nonnegative("axpy", "n", n);
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(y, alpha, x, n);
  check_launch(ctx, "axpy");
}

void fill(const Context& ctx, float* x, float value, int64_t n) {
  require_nonnegative("fill", "n", n);
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(x, value, n);
  check_launch(ctx, "fill");
}

void convert(const Context& ctx, ActPtr dst, const float* src, int64_t n) {
  require_nonnegative("convert", "n", n);
  if (n == 0) return;
  with_storage(dst.type(), [&](auto t) {
    using T = decltype(t);
    convert_kernel<T><<<grid_for(n), kThreads, 0, ctx.stream>>>(typed<T>(dst), src, n);
  });
  check_launch(ctx, "convert");
}

void scale_matrix(const Context& ctx, const char* op, ActPtr c, int64_t ldc, int64_t m, int64_t n, float beta) {
  if (m == 0 || n == 0) return;
  with_storage(c.type(), [&](auto t) {
    using T = decltype(t);
    scale_matrix_kernel<T><<<grid_for(m * n), kThreads, 0, ctx.stream>>>(typed<T>(c), ldc, m, n, beta);
  });
  check_launch(ctx, op);
}

}  // namespace axonn::cuda
