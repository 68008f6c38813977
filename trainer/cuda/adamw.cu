#include <cmath>
#include <string>

#include "trainer/cuda/adamw.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"

namespace axonn::cuda {
namespace {

using op_checks::AdamWConstants;

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
  const AdamWConstants k = op_checks::adamw_constants(n, step, decay);
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(param, grad, m, v, n, k);
  check_launch(ctx, "adamw");
}

}  // namespace axonn::cuda
