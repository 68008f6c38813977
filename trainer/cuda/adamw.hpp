#pragma once
// AdamW on float32 master weights: param, m, v (n) updated in place, the CPU backend's
// formula (Backend's AdamWStep); the bias corrections 1 − β^t are computed on the host in
// double, as the CPU backend does.
#include <cstdint>

#include "trainer/backend.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

void adamw(const Context& ctx, float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           bool decay);

}  // namespace axonn::cuda
