#pragma once
// The router's choice for one token, shared by the CPU and the CUDA backend so that both pick
// the same experts, ties included: a layout that runs the router on either device must route
// every token as the serial CPU run does.
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

}  // namespace axonn

#undef AXONN_HOST_DEVICE
