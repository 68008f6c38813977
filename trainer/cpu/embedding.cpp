#include "trainer/cpu/embedding.hpp"

#include <algorithm>

#include "trainer/cpu/check.hpp"

namespace axonn::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t m, int64_t c, int64_t v0,
                       int64_t v_local) {
  require_nonnegative("embedding_forward", "m", m);
  require_nonnegative("embedding_forward", "c", c);
  require_nonnegative("embedding_forward", "v_local", v_local);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = tokens[i] - v0;
    float* o = out + i * c;
    if (r >= 0 && r < v_local)
      std::copy(table + r * c, table + (r + 1) * c, o);
    else
      std::fill(o, o + c, 0.0f);
  }
}

void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t m, int64_t c, int64_t v0,
                        int64_t v_local) {
  require_nonnegative("embedding_backward", "m", m);
  require_nonnegative("embedding_backward", "c", c);
  require_nonnegative("embedding_backward", "v_local", v_local);
  // In token order, so a row that several tokens share adds up in a fixed order.
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = tokens[i] - v0;
    if (r < 0 || r >= v_local) continue;
    float* d = dtable + r * c;
    const float* g = dout + i * c;
    for (int64_t j = 0; j < c; ++j) d[j] += g[j];
  }
}

void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t c) {
  require_nonnegative("position_forward", "B", B);
  require_nonnegative("position_forward", "T", T);
  require_nonnegative("position_forward", "c", c);
  for (int64_t b = 0; b < B; ++b) {
    float* o = out + b * T * c;
    for (int64_t j = 0; j < T * c; ++j) o[j] += wpe[j];
  }
}

void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t c) {
  require_nonnegative("position_backward", "B", B);
  require_nonnegative("position_backward", "T", T);
  require_nonnegative("position_backward", "c", c);
  for (int64_t b = 0; b < B; ++b) {
    const float* g = dout + b * T * c;
    for (int64_t j = 0; j < T * c; ++j) dwpe[j] += g[j];
  }
}

}  // namespace axonn::cpu
