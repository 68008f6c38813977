#pragma once
// AdamW on one float32 buffer (the formula is at AdamWStep in trainer/backend.hpp).
#include <cstdint>

#include "trainer/backend.hpp"
#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// param, m, v (n) updated in place from grad (n); decay = false skips the weight decay.
void adamw(ThreadPool& pool, float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           bool decay);

}  // namespace axonn::cpu
