#include "trainer/cpu/bias.hpp"

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"

namespace axonn::cpu {
namespace {

AXONN_SIMD_CLONES void forward_rows(float* out, const float* bias, int64_t n, int64_t ld, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float* row = out + i * ld;
    for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
  }
}

// Columns [j0, j1), all rows in order: row by row, so the inner loop runs along contiguous
// memory (vectorized over columns).
AXONN_SIMD_CLONES void backward_columns(float* dbias, const float* dout, int64_t m, int64_t ld, int64_t j0,
                                        int64_t j1) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = dout + i * ld;
    for (int64_t j = j0; j < j1; ++j) dbias[j] += row[j];
  }
}

}  // namespace

void bias_forward(ThreadPool& pool, float* out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  op_checks::require_bias_shape("bias_forward", m, n, ld);
  parallel_rows(pool, m, n, [&](int64_t begin, int64_t end) { forward_rows(out, bias, n, ld, begin, end); });
}

void bias_backward(ThreadPool& pool, float* dbias, const float* dout, int64_t m, int64_t n, int64_t ld) {
  op_checks::require_bias_shape("bias_backward", m, n, ld);
  // Split over columns, not rows: every column keeps its serial order of additions.
  parallel_for(pool, n, (kMinParallelElements + m) / (m > 0 ? m : 1), kCacheLineFloats,
               [&](int64_t j0, int64_t j1) { backward_columns(dbias, dout, m, ld, j0, j1); });
}

}  // namespace axonn::cpu
