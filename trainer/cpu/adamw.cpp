#include "trainer/cpu/adamw.hpp"

#include <cmath>
#include <string>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"

namespace axonn::cpu {

namespace {

using op_checks::AdamWConstants;

AXONN_SIMD_CLONES void adamw_range(float* param, const float* grad, float* m, float* v, const AdamWConstants& k,
                                   int64_t begin, int64_t end) {
  const float b1 = k.b1, b2 = k.b2, lr = k.lr, eps = k.eps, gs = k.gs, wd = k.wd;
  const float correction1 = k.correction1, correction2 = k.correction2;
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / correction1;
    const float v_hat = vi / correction2;
    param[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * param[i]);
  }
}

}  // namespace

void adamw(ThreadPool& pool, float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           bool decay) {
  const AdamWConstants k = op_checks::adamw_constants(n, step, decay);
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { adamw_range(param, grad, m, v, k, begin, end); });
}

}  // namespace axonn::cpu
