#pragma once
// Token embedding, vocab-parallel: this rank holds rows [v0, v0 + v_local) of the table as
// table (v_local, c); tokens outside the range get zeros and come from the other ranks in the
// caller's all-reduce. Position embedding: wpe (T, c) added to every sequence.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

// out (m, c) = table[tokens[i] − v0] for tokens in range, else 0
void embedding_forward(ThreadPool& pool, float* out, const int32_t* tokens, const float* table, int64_t m, int64_t c,
                       int64_t v0, int64_t v_local);
// dtable (v_local, c) += dout[i] for each token i in range, in token order
void embedding_backward(ThreadPool& pool, float* dtable, const float* dout, const int32_t* tokens, int64_t m, int64_t c,
                        int64_t v0, int64_t v_local);
// out (B, T, c) += wpe (T, c)
void position_forward(ThreadPool& pool, float* out, const float* wpe, int64_t B, int64_t T, int64_t c);
// dwpe (T, c) += Σ_b dout (B, T, c)
void position_backward(ThreadPool& pool, float* dwpe, const float* dout, int64_t B, int64_t T, int64_t c);

}  // namespace axonn::cpu
