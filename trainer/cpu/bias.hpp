#pragma once
// Bias of a linear layer: added to every row after the forward all-reduce; its gradient is
// the column sums of dout over this rank's tokens (a partial sum the caller reduces).
#include <cstdint>

namespace axonn::cpu {

// out and dout are (m, n) with row stride ld >= n.
void bias_forward(float* out, const float* bias, int64_t m, int64_t n, int64_t ld);     // out += bias (n)
void bias_backward(float* dbias, const float* dout, int64_t m, int64_t n, int64_t ld);  // dbias (n) += Σ_rows dout

}  // namespace axonn::cpu
