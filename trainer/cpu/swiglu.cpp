#include "trainer/cpu/swiglu.hpp"

#include "trainer/cpu/check.hpp"
#include "trainer/cpu/simd.hpp"
#include "trainer/cpu/vec_math.hpp"

namespace axonn::cpu {
namespace {

AXONN_SIMD_CLONES void forward_rows(float* out, const float* gate_up, int64_t f, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    float* o = out + i * f;
    for (int64_t j = 0; j < f; ++j) {
      const float g = gate[j];
      o[j] = g * sigmoid_approx(g) * up[j];
    }
  }
}

AXONN_SIMD_CLONES void backward_rows(float* dgate_up, const float* gate_up, const float* dout, int64_t f, int64_t begin,
                                     int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    const float* dy = dout + i * f;
    float* dgate = dgate_up + i * 2 * f;
    float* dup = dgate + f;
    for (int64_t j = 0; j < f; ++j) {
      const float g = gate[j], s = sigmoid_approx(g);
      dgate[j] = dy[j] * up[j] * (s * (1.0f + g * (1.0f - s)));
      dup[j] = dy[j] * (g * s);
    }
  }
}

}  // namespace

void swiglu_forward(ThreadPool& pool, float* out, const float* gate_up, int64_t m, int64_t f) {
  op_checks::require_swiglu_shape("swiglu_forward", m, f);
  parallel_rows(pool, m, 3 * f, [&](int64_t begin, int64_t end) { forward_rows(out, gate_up, f, begin, end); });
}

void swiglu_backward(ThreadPool& pool, float* dgate_up, const float* gate_up, const float* dout, int64_t m, int64_t f) {
  op_checks::require_swiglu_shape("swiglu_backward", m, f);
  parallel_rows(pool, m, 5 * f,
                [&](int64_t begin, int64_t end) { backward_rows(dgate_up, gate_up, dout, f, begin, end); });
}

}  // namespace axonn::cpu
