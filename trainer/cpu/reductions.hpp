#pragma once
// Reductions of a whole buffer into a scalar that stays in device memory (out[0] +=), so the
// caller can add several buffers and then make one all-reduce: the loss for logging and the
// squared global gradient norm for clipping. Summed in a fixed order (vec_math.hpp).
#include <cstdint>

namespace axonn::cpu {

void sum(float* out, const float* x, int64_t n);          // out[0] += Σ x
void sum_squares(float* out, const float* x, int64_t n);  // out[0] += Σ x²

}  // namespace axonn::cpu
