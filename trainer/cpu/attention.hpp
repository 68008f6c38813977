#pragma once
// Causal multi-head self-attention on this rank's h heads (see Backend::attention_forward for
// the q, k, v views). Per (sequence, head) the products QK^T, PV and their backward run as
// sgemm over blocks of kAttentionRowBlock query rows, each against only the keys it can see,
// so the masked upper triangle is (almost) never computed. The (sequence, head) pairs are
// split over the pool's threads, each running its GEMMs on OpenBLAS single-threaded
// (SerialBlasScope): a pair's result does not depend on which thread computed it.
#include <cstdint>
#include <vector>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

constexpr int64_t kAttentionRowBlock = 64;

// out (B, T, h·d); probs (B, h, T, T), 0 above the diagonal.
void attention_forward(ThreadPool& pool, float* out, float* probs, const float* q, const float* k, const float* v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d);
// dq, dk, dv: views like q, k, v (stride ld), overwritten. scratch: resized to T·T floats per thread.
void attention_backward(ThreadPool& pool, float* dq, float* dk, float* dv, const float* dout, const float* probs,
                        const float* q, const float* k, const float* v, int64_t ld, int64_t B, int64_t T, int64_t h,
                        int64_t d, std::vector<float>& scratch);

}  // namespace axonn::cpu
