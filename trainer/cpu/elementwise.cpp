#include "trainer/cpu/elementwise.hpp"

#include <algorithm>
#include <cstring>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"

namespace axonn::cpu {
namespace {

AXONN_SIMD_CLONES void add_range(float* out, const float* a, const float* b, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
}

AXONN_SIMD_CLONES void scale_range(float* x, float alpha, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) x[i] *= alpha;
}

AXONN_SIMD_CLONES void axpy_range(float* y, float alpha, const float* x, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) y[i] += alpha * x[i];
}

AXONN_SIMD_CLONES void fill_range(float* x, float value, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) x[i] = value;
}

}  // namespace

void add(ThreadPool& pool, float* out, const float* a, const float* b, int64_t n) {
  require_nonnegative("add", "n", n);
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { add_range(out, a, b, begin, end); });
}

void scale(ThreadPool& pool, float* x, float alpha, int64_t n) {
  require_nonnegative("scale", "n", n);
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { scale_range(x, alpha, begin, end); });
}

void axpy(ThreadPool& pool, float* y, float alpha, const float* x, int64_t n) {
  require_nonnegative("axpy", "n", n);
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { axpy_range(y, alpha, x, begin, end); });
}

void fill(ThreadPool& pool, float* x, float value, int64_t n) {
  require_nonnegative("fill", "n", n);
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { fill_range(x, value, begin, end); });
}

void zero_bytes(ThreadPool& pool, void* ptr, size_t bytes) {
  auto* p = static_cast<unsigned char*>(ptr);
  // In 64-byte units, so that the parts split on cache lines.
  const auto lines = static_cast<int64_t>((bytes + 63) / 64);
  parallel_for(pool, lines, kMinParallelElements / 16, 1, [&](int64_t begin, int64_t end) {
    const size_t first = static_cast<size_t>(begin) * 64;
    std::memset(p + first, 0, std::min(bytes, static_cast<size_t>(end) * 64) - first);
  });
}

void copy_2d(ThreadPool& pool, float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
             int64_t cols) {
  require_nonnegative("copy_2d", "rows", rows);
  require_nonnegative("copy_2d", "cols", cols);
  require_at_most("copy_2d", "cols", cols, "ld_dst", ld_dst);
  require_at_most("copy_2d", "cols", cols, "ld_src", ld_src);
  parallel_rows(pool, rows, cols, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) std::copy(src + i * ld_src, src + i * ld_src + cols, dst + i * ld_dst);
  });
}

}  // namespace axonn::cpu
