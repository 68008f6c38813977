#include "trainer/cpu/cross_entropy.hpp"

#include <cmath>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

AXONN_SIMD_CLONES void max_rows(float* row_max, const float* logits, int64_t v_local, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) row_max[i] = max_floats(logits + i * v_local, v_local);
}

AXONN_SIMD_CLONES void partials_rows(float* partials, float* max, float* exps, const float* gathered_max,
                                     int64_t groups, const float* logits, const int32_t* targets, int64_t m,
                                     int64_t v_local, int64_t v0, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float mx = gathered_max[i];
    for (int64_t g = 1; g < groups; ++g) mx = gathered_max[g * m + i] > mx ? gathered_max[g * m + i] : mx;
    max[i] = mx;
    const float* row = logits + i * v_local;
    const int64_t r = targets[i] - v0;
    // Read the target's logit before exps (which may be the same row) overwrites it.
    const float target_logit = (r >= 0 && r < v_local) ? row[r] : 0.0f;
    float* e = exps + i * v_local;
    for (int64_t j = 0; j < v_local; ++j) e[j] = exp_approx(row[j] - mx);
    partials[2 * i] = static_cast<float>(sum_floats(e, v_local));
    partials[2 * i + 1] = target_logit;
  }
}

AXONN_SIMD_CLONES void backward_rows(float* dlogits, const float* exps, const float* partials, const int32_t* targets,
                                     int64_t v_local, int64_t v0, float scale, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float s = scale / partials[2 * i];  // softmax = exps / Σ exps
    const float* e = exps + i * v_local;
    float* d = dlogits + i * v_local;
    for (int64_t j = 0; j < v_local; ++j) d[j] = e[j] * s;
    const int64_t r = targets[i] - v0;
    if (r >= 0 && r < v_local) d[r] -= scale;
  }
}

}  // namespace

void cross_entropy_row_max(ThreadPool& pool, float* row_max, const float* logits, int64_t m, int64_t v_local) {
  require_nonnegative("cross_entropy_row_max", "m", m);
  require_positive("cross_entropy_row_max", "v_local", v_local);
  parallel_rows(pool, m, v_local, [&](int64_t begin, int64_t end) { max_rows(row_max, logits, v_local, begin, end); });
}

void cross_entropy_partials(ThreadPool& pool, float* partials, float* max, float* exps, const float* gathered_max,
                            int64_t groups, const float* logits, const int32_t* targets, int64_t m, int64_t v_local,
                            int64_t v0) {
  require_nonnegative("cross_entropy_partials", "m", m);
  require_positive("cross_entropy_partials", "v_local", v_local);
  require_positive("cross_entropy_partials", "groups", groups);
  parallel_rows(pool, m, v_local, [&](int64_t begin, int64_t end) {
    partials_rows(partials, max, exps, gathered_max, groups, logits, targets, m, v_local, v0, begin, end);
  });
}

void cross_entropy_loss(ThreadPool& pool, float* loss, const float* partials, const float* max, int64_t m) {
  require_nonnegative("cross_entropy_loss", "m", m);
  parallel_rows(pool, m, 64, [&](int64_t begin, int64_t end) {  // a log costs about 64 additions
    for (int64_t i = begin; i < end; ++i) loss[i] = std::log(partials[2 * i]) + max[i] - partials[2 * i + 1];
  });
}

void cross_entropy_backward(ThreadPool& pool, float* dlogits, const float* exps, const float* partials,
                            const int32_t* targets, int64_t m, int64_t v_local, int64_t v0, float scale) {
  require_nonnegative("cross_entropy_backward", "m", m);
  require_positive("cross_entropy_backward", "v_local", v_local);
  parallel_rows(pool, m, v_local, [&](int64_t begin, int64_t end) {
    backward_rows(dlogits, exps, partials, targets, v_local, v0, scale, begin, end);
  });
}

}  // namespace axonn::cpu
