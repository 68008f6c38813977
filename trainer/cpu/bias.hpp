#pragma once
// Bias of a linear layer: added to every row after the forward all-reduce; its gradient is
// the column sums of dout over this rank's tokens (a partial sum the caller reduces).
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// out and dout are (m, n) with row stride ld >= n.
void bias_forward(ThreadPool& pool, float* out, const float* bias, int64_t m, int64_t n, int64_t ld);  // out += bias
// dbias (n) += Σ_rows dout, each column summed over the rows in order
void bias_backward(ThreadPool& pool, float* dbias, const float* dout, int64_t m, int64_t n, int64_t ld);

}  // namespace axonn::cpu
