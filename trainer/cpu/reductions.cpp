#include "trainer/cpu/reductions.hpp"

#include <algorithm>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

AXONN_SIMD_CLONES void sum_blocks(double* sums, const float* x, int64_t n, bool squares, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t start = b * kSumBlock, end = std::min(start + kSumBlock, n);
    sums[b] = static_cast<double>(squares ? block_sum_squares(x, start, end) : block_sum(x, start, end));
  }
}

// out[0] += Σ over blocks in block order, as sum_floats / sum_squares_floats add them.
void reduce(ThreadPool& pool, std::vector<double>& block_sums, float* out, const float* x, int64_t n, bool squares) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  block_sums.resize(static_cast<size_t>(blocks));
  parallel_for(pool, blocks, kMinParallelElements / kSumBlock, 1,
               [&](int64_t b0, int64_t b1) { sum_blocks(block_sums.data(), x, n, squares, b0, b1); });
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += block_sums[static_cast<size_t>(b)];
  out[0] = static_cast<float>(static_cast<double>(out[0]) + total);
}

}  // namespace

void sum(ThreadPool& pool, std::vector<double>& block_sums, float* out, const float* x, int64_t n) {
  require_nonnegative("sum", "n", n);
  reduce(pool, block_sums, out, x, n, false);
}

void sum_squares(ThreadPool& pool, std::vector<double>& block_sums, float* out, const float* x, int64_t n) {
  require_nonnegative("sum_squares", "n", n);
  reduce(pool, block_sums, out, x, n, true);
}

}  // namespace axonn::cpu
