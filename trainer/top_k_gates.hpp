#pragma once
// The router's choice for one token and its gradient, shared by the CPU and the CUDA backend
// so that both pick the same experts, ties included, and differentiate the gates alike: a
// layout that runs the router on either device must route every token as the serial CPU run
// does.
#include <cstdint>

#if defined(__CUDACC__)
#define AXONN_HOST_DEVICE __host__ __device__
#else
#define AXONN_HOST_DEVICE
#endif

namespace axonn {

// p: the token's E router probabilities (a softmax; E >= 2 where k = 2). Writes its k (1 or 2)
// experts, the most probable first, ties to the lower index (strict >), and their gates: the
// probability itself for k = 1, the two renormalized to sum to 1 for k = 2.
AXONN_HOST_DEVICE inline void top_k_gates(const float* p, int64_t E, int64_t k, int32_t* experts, float* gates) {
  int64_t first = 0, second = -1;
  for (int64_t j = 1; j < E; ++j) {
    if (p[j] > p[first]) {
      second = first;
      first = j;
    } else if (second < 0 || p[j] > p[second]) {
      second = j;
    }
  }
  experts[0] = static_cast<int32_t>(first);
  if (k == 1) {
    gates[0] = p[first];
    return;
  }
  experts[1] = static_cast<int32_t>(second);
  const float sum = p[first] + p[second];
  gates[0] = p[first] / sum;
  gates[1] = p[second] / sum;
}

// top_k_gates's gates back to the probabilities of the token's experts e0 and e1 (e1 = -1 for
// k = 1): for k = 1 the gate is p[e0], so d/dp_e0 = dgates[0]; for k = 2, g0 = p0/S and
// g1 = p1/S with S = p0 + p1, so dg0/dp0 = p1/S², dg0/dp1 = -p0/S², and so for g1. An expert
// outside [0, E) has probability 0 here. The caller adds these at e0 and e1 to the other
// terms of d/dp and takes the sum through the softmax.
struct GateGradient {
  float d0 = 0.0f;  // d/dp_e0
  float d1 = 0.0f;  // d/dp_e1
};
AXONN_HOST_DEVICE inline GateGradient top_k_gates_gradient(const float* p, int64_t E, int64_t k, int64_t e0, int64_t e1,
                                                           const float* dgates) {
  GateGradient g;
  if (k == 1) {
    g.d0 = dgates[0];
    return g;
  }
  const float p0 = e0 >= 0 && e0 < E ? p[e0] : 0.0f, p1 = e1 >= 0 && e1 < E ? p[e1] : 0.0f;
  const float sum = p0 + p1;
  const float inv_sq = 1.0f / (sum * sum);
  const float diff = dgates[0] - dgates[1];
  g.d0 = p1 * diff * inv_sq;
  g.d1 = -(p0 * diff * inv_sq);
  return g;
}

}  // namespace axonn

#undef AXONN_HOST_DEVICE
