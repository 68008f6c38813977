#include "trainer/cpu/adamw.hpp"

#include <cmath>
#include <string>

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"

namespace axonn::cpu {

namespace {

struct AdamWConstants {
  float b1, b2, lr, eps, gs, wd, correction1, correction2;
};

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
  require_nonnegative("adamw", "n", n);
  require_positive("adamw", "step t", step.t);
  if (!(step.beta1 >= 0.0f && step.beta1 < 1.0f && step.beta2 >= 0.0f && step.beta2 < 1.0f))
    fail("adamw", "betas (" + std::to_string(step.beta1) + ", " + std::to_string(step.beta2) + ") must lie in [0, 1)");
  // Bias corrections in double: 1 − β^t loses digits in float for β close to 1.
  const double t = static_cast<double>(step.t);
  AdamWConstants k{};
  k.correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(step.beta1), t));
  k.correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(step.beta2), t));
  k.b1 = step.beta1;
  k.b2 = step.beta2;
  k.lr = step.lr;
  k.eps = step.eps;
  k.gs = step.grad_scale;
  k.wd = decay ? step.weight_decay : 0.0f;
  parallel_elements(pool, n, [&](int64_t begin, int64_t end) { adamw_range(param, grad, m, v, k, begin, end); });
}

}  // namespace axonn::cpu
