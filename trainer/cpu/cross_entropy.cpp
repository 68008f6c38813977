#include "trainer/cpu/cross_entropy.hpp"

#include <cmath>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {

void cross_entropy_row_max(float* row_max, const float* logits, int64_t m, int64_t v_local) {
  require_nonnegative("cross_entropy_row_max", "m", m);
  require_positive("cross_entropy_row_max", "v_local", v_local);
  for (int64_t i = 0; i < m; ++i) row_max[i] = max_floats(logits + i * v_local, v_local);
}

void cross_entropy_partials(float* partials, float* max, float* exps, const float* gathered_max, int64_t groups,
                            const float* logits, const int32_t* targets, int64_t m, int64_t v_local, int64_t v0) {
  require_nonnegative("cross_entropy_partials", "m", m);
  require_positive("cross_entropy_partials", "v_local", v_local);
  require_positive("cross_entropy_partials", "groups", groups);
  for (int64_t i = 0; i < m; ++i) {
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

void cross_entropy_loss(float* loss, const float* partials, const float* max, int64_t m) {
  require_nonnegative("cross_entropy_loss", "m", m);
  for (int64_t i = 0; i < m; ++i) loss[i] = std::log(partials[2 * i]) + max[i] - partials[2 * i + 1];
}

void cross_entropy_backward(float* dlogits, const float* exps, const float* partials, const int32_t* targets, int64_t m,
                            int64_t v_local, int64_t v0, float scale) {
  require_nonnegative("cross_entropy_backward", "m", m);
  require_positive("cross_entropy_backward", "v_local", v_local);
  for (int64_t i = 0; i < m; ++i) {
    const float s = scale / partials[2 * i];  // softmax = exps / Σ exps
    const float* e = exps + i * v_local;
    float* d = dlogits + i * v_local;
    for (int64_t j = 0; j < v_local; ++j) d[j] = e[j] * s;
    const int64_t r = targets[i] - v0;
    if (r >= 0 && r < v_local) d[r] -= scale;
  }
}

}  // namespace axonn::cpu
