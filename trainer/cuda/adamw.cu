#include <cmath>
#include <string>

#include "trainer/cuda/adamw.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"

namespace axonn::cuda {
namespace {

struct AdamWConstants {
  float b1, b2, lr, eps, gs, wd, correction1, correction2;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWConstants k) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = grad[i] * k.gs;
    const float mi = k.b1 * m[i] + (1.0f - k.b1) * g;
    const float vi = k.b2 * v[i] + (1.0f - k.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / k.correction1;
    const float v_hat = vi / k.correction2;
    const float p = param[i];
    param[i] = p - k.lr * (m_hat / (sqrtf(v_hat) + k.eps) + k.wd * p);
  }
}

}  // namespace

void adamw(const Context& ctx, float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           bool decay) {
  require_nonnegative("adamw", "n", n);
  require_positive("adamw", "step t", step.t);
  if (!(step.beta1 >= 0.0f && step.beta1 < 1.0f && step.beta2 >= 0.0f && step.beta2 < 1.0f))
    fail("adamw", "betas (" + std::to_string(step.beta1) + ", " + std::to_string(step.beta2) + ") must lie in [0, 1)");
  if (n == 0) return;
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
  adamw_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(param, grad, m, v, n, k);
  check_launch(ctx, "adamw");
}

}  // namespace axonn::cuda
