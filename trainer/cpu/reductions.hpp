#pragma once
// Reductions of a whole buffer into a scalar that stays in device memory (out[0] +=), so the
// caller can add several buffers and then make one all-reduce: the loss for logging and the
// squared global gradient norm for clipping. Summed in a fixed order (vec_math.hpp): the
// blocks of kSumBlock elements may be summed on several threads, but their float sums join
// the double total in block order, so the result does not depend on the thread count.
#include <cstdint>
#include <vector>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// block_sums: scratch, resized to one double per block.
void sum(ThreadPool& pool, std::vector<double>& block_sums, float* out, const float* x, int64_t n);  // out[0] += Σ x
void sum_squares(ThreadPool& pool, std::vector<double>& block_sums, float* out, const float* x,
                 int64_t n);  // out[0] += Σ x²

}  // namespace axonn::cpu
