#include "trainer/cpu/embedding.hpp"

#include <algorithm>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"

namespace axonn::cpu {
namespace {
// Columns [j0, j1) of every token's row, in token order, so a table row that several tokens
// share adds up in a fixed order.
AXONN_SIMD_CLONES void scatter_add_columns(float* dtable, const float* dout, const int32_t* tokens, int64_t m,
                                           int64_t c, int64_t v0, int64_t v_local, int64_t j0, int64_t j1) {
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = tokens[i] - v0;
    if (r < 0 || r >= v_local) continue;
    float* d = dtable + r * c;
    const float* g = dout + i * c;
    for (int64_t j = j0; j < j1; ++j) d[j] += g[j];
  }
}

AXONN_SIMD_CLONES void add_rows(float* out, const float* rows, int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; ++j) out[j] += rows[j];
}

}  // namespace

void embedding_forward(ThreadPool& pool, float* out, const int32_t* tokens, const float* table, int64_t m, int64_t c,
                       int64_t v0, int64_t v_local) {
  op_checks::require_embedding_sizes("embedding_forward", m, c, v_local);
  parallel_rows(pool, m, c, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = tokens[i] - v0;
      float* o = out + i * c;
      if (r >= 0 && r < v_local)
        std::copy(table + r * c, table + (r + 1) * c, o);
      else
        std::fill(o, o + c, 0.0f);
    }
  });
}

void embedding_backward(ThreadPool& pool, float* dtable, const float* dout, const int32_t* tokens, int64_t m, int64_t c,
                        int64_t v0, int64_t v_local) {
  op_checks::require_embedding_sizes("embedding_backward", m, c, v_local);
  // Split over columns: two threads never add into the same element, and each element keeps
  // its serial (token) order.
  parallel_for(pool, c, (kMinParallelElements + m) / (m > 0 ? m : 1), kCacheLineFloats,
               [&](int64_t j0, int64_t j1) { scatter_add_columns(dtable, dout, tokens, m, c, v0, v_local, j0, j1); });
}

void position_forward(ThreadPool& pool, float* out, const float* wpe, int64_t B, int64_t T, int64_t c) {
  require_nonnegative("position_forward", "B", B);
  require_nonnegative("position_forward", "T", T);
  require_nonnegative("position_forward", "c", c);
  for (int64_t b = 0; b < B; ++b)
    parallel_elements(pool, T * c, [&](int64_t begin, int64_t end) { add_rows(out + b * T * c, wpe, begin, end); });
}

void position_backward(ThreadPool& pool, float* dwpe, const float* dout, int64_t B, int64_t T, int64_t c) {
  require_nonnegative("position_backward", "B", B);
  require_nonnegative("position_backward", "T", T);
  require_nonnegative("position_backward", "c", c);
  // Element ranges of dwpe, each summing the sequences in order.
  parallel_for(pool, T * c, kMinParallelElements / (B > 0 ? B : 1), kCacheLineFloats, [&](int64_t begin, int64_t end) {
    for (int64_t b = 0; b < B; ++b) add_rows(dwpe, dout + b * T * c, begin, end);
  });
}

}  // namespace axonn::cpu
