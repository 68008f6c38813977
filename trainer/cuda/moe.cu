#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/moe.hpp"
#include "trainer/top_k_gates.hpp"

namespace axonn::cuda {
namespace {

__device__ inline bool in_range(int64_t index, int64_t size) { return index >= 0 && index < size; }

// logits[t, e] = Σ_j x[t, j]·w[j, e], j in order. Consecutive threads take consecutive
// experts of one row: they read one row of w together and x[t, j] once (a broadcast).
template <typename T>
__global__ void router_logits_kernel(float* logits, const T* x, const float* w, int64_t m, int64_t c, int64_t E) {
  const int64_t total = m * E;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t t = idx / E, e = idx - t * E;
    const T* row = x + t * c;
    float acc = 0.0f;
    for (int64_t j = 0; j < c; ++j) acc += load(row + j) * w[j * E + e];
    logits[idx] = acc;
  }
}

// dw[j, e] += Σ_t x[t, j]·dlogits[t, e], t in order.
template <typename T>
__global__ void router_dw_kernel(float* dw, const T* x, const float* dlogits, int64_t m, int64_t c, int64_t E) {
  const int64_t total = c * E;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t j = idx / E, e = idx - j * E;
    float acc = 0.0f;
    for (int64_t t = 0; t < m; ++t) acc += load(x + t * c + j) * dlogits[t * E + e];
    dw[idx] += acc;
  }
}

// dx[t, j] += Σ_e dlogits[t, e]·w[j, e], e in order.
template <typename T>
__global__ void router_dx_kernel(T* dx, const float* dlogits, const float* w, int64_t m, int64_t c, int64_t E) {
  const int64_t total = m * c;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t t = idx / c, j = idx - t * c;
    const float* d = dlogits + t * E;
    const float* wj = w + j * E;
    float acc = 0.0f;
    for (int64_t e = 0; e < E; ++e) acc += d[e] * wj[e];
    store(dx + idx, load(dx + idx) + acc);
  }
}

// One thread per row, as the CPU backend: softmax in place over the row (each element read
// before it is overwritten, so probs may alias logits), then the k largest with strict >
// (ties to the lower index) and their gates.
__global__ void router_top_k_kernel(float* probs, int32_t* experts, float* gates, const float* logits, int64_t m,
                                    int64_t E, int64_t k) {
  for (int64_t i = global_thread(); i < m; i += grid_threads()) {
    const float* l = logits + i * E;
    float* p = probs + i * E;
    float mx = neg_inf();
    for (int64_t j = 0; j < E; ++j) mx = l[j] > mx ? l[j] : mx;
    float total = 0.0f;
    for (int64_t j = 0; j < E; ++j) {
      const float e = expf(l[j] - mx);
      p[j] = e;
      total += e;
    }
    for (int64_t j = 0; j < E; ++j) p[j] = p[j] / total;
    top_k_gates(p, E, k, experts + i * k, gates + i * k);
  }
}

// One thread per row: the gates' gradient back to their probabilities (k = 2 through
// g_s = p_s/(p_0 + p_1)), added to coef at their experts, then through the softmax. An
// expert index outside [0, E) adds nothing.
__global__ void router_logits_grad_kernel(float* dlogits, const float* probs, const int32_t* experts,
                                          const float* dgates, const float* coef, int64_t m, int64_t E, int64_t k) {
  for (int64_t i = global_thread(); i < m; i += grid_threads()) {
    const float* p = probs + i * E;
    const int64_t e0 = experts[i * k], e1 = k == 2 ? experts[i * k + 1] : -1;
    const GateGradient g = top_k_gates_gradient(p, E, k, e0, e1, dgates + i * k);
    const float d0 = g.d0, d1 = g.d1;
    float dot = 0.0f;
    for (int64_t j = 0; j < E; ++j) {
      const float d = (coef != nullptr ? coef[j] : 0.0f) + (j == e0 ? d0 : 0.0f) + (j == e1 ? d1 : 0.0f);
      dot += p[j] * d;
    }
    float* out = dlogits + i * E;
    for (int64_t j = 0; j < E; ++j) {
      const float d = (coef != nullptr ? coef[j] : 0.0f) + (j == e0 ? d0 : 0.0f) + (j == e1 ? d1 : 0.0f);
      out[j] = p[j] * (d - dot);
    }
  }
}

// out[j, col] = in[rows[j], col]·scale[j]: one rounded product, as the CPU's.
template <typename T>
__global__ void gather_rows_kernel(T* out, const T* in, const int32_t* rows, const float* scale, int64_t n, int64_t m,
                                   int64_t c) {
  const int64_t total = n * c;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t j = idx / c, col = idx - j * c;
    const int64_t r = rows[j];
    float v = 0.0f;
    if (in_range(r, m)) {
      v = load(in + r * c + col);
      if (scale != nullptr) v = __fmul_rn(v, scale[j]);
    }
    store(out + idx, v);
  }
}

// out[t, col] += gate·in[slot, col] over the slots in order, each product rounded before it
// is added (no fused multiply-add): the CPU's operations, stored once.
template <typename T>
__global__ void combine_rows_kernel(T* out, const T* in, const int32_t* slots, const float* gates, int64_t m, int64_t k,
                                    int64_t n, int64_t c) {
  const int64_t total = m * c;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t t = idx / c, col = idx - t * c;
    float acc = load(out + idx);
    for (int64_t s = 0; s < k; ++s) {
      const int64_t slot = slots[t * k + s];
      if (!in_range(slot, n)) continue;
      const float v = load(in + slot * c + col);
      acc += gates != nullptr ? __fmul_rn(gates[t * k + s], v) : v;
    }
    store(out + idx, acc);
  }
}

// Warp `pair` = t·k + s of the grid: dgates[pair] = Σ_col dout[t, col]·in[slot, col], each
// lane over the columns lane, lane + 32, ..., then the warp's fixed tree. Whole warps
// return together (warp_sum needs every lane).
template <typename T>
__global__ void combine_gates_grad_kernel(float* dgates, const T* dout, const T* in, const int32_t* slots, int64_t m,
                                          int64_t k, int64_t n, int64_t c) {
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  if (pair >= m * k) return;
  const int64_t t = pair / k;
  const int64_t slot = slots[pair];
  if (!in_range(slot, n)) {
    if (lane == 0) dgates[pair] = 0.0f;
    return;
  }
  const T* a = dout + t * c;
  const T* b = in + slot * c;
  float acc = 0.0f;
  for (int64_t col = lane; col < c; col += kWarpSize) acc += load(a + col) * load(b + col);
  acc = warp_sum(acc);
  if (lane == 0) dgates[pair] = acc;
}

}  // namespace

void router_logits(const Context& ctx, float* logits, ConstActPtr x, const float* w, int64_t m, int64_t c, int64_t E) {
  const char* op = "router_logits";
  op_checks::require_router_gemm_shape(op, m, c, E);
  if (m == 0) return;
  with_storage(x.type(), [&](auto s) {
    using T = decltype(s);
    router_logits_kernel<T><<<grid_for(m * E), kThreads, 0, ctx.stream>>>(logits, typed<T>(x), w, m, c, E);
  });
  check_launch(ctx, op);
}

void router_backward(const Context& ctx, ActPtr dx, float* dw, const float* dlogits, ConstActPtr x, const float* w,
                     int64_t m, int64_t c, int64_t E) {
  const char* op = "router_backward";
  op_checks::require_router_gemm_shape(op, m, c, E);
  if (m == 0 || c == 0) return;
  with_storage(common_type(op, {dx, x}), [&](auto s) {
    using T = decltype(s);
    router_dw_kernel<T><<<grid_for(c * E), kThreads, 0, ctx.stream>>>(dw, typed<T>(x), dlogits, m, c, E);
    check_launch(ctx, op);
    router_dx_kernel<T><<<grid_for(m * c), kThreads, 0, ctx.stream>>>(typed<T>(dx), dlogits, w, m, c, E);
    check_launch(ctx, op);
  });
}

void router_top_k(const Context& ctx, float* probs, int32_t* experts, float* gates, const float* logits, int64_t m,
                  int64_t E, int64_t k) {
  const char* op = "router_top_k";
  op_checks::require_router_shape(op, m, E, k);
  if (m == 0) return;
  router_top_k_kernel<<<grid_for(m), kThreads, 0, ctx.stream>>>(probs, experts, gates, logits, m, E, k);
  check_launch(ctx, op);
}

void router_logits_grad(const Context& ctx, float* dlogits, const float* probs, const int32_t* experts,
                        const float* dgates, const float* coef, int64_t m, int64_t E, int64_t k) {
  const char* op = "router_logits_grad";
  op_checks::require_router_shape(op, m, E, k);
  if (m == 0) return;
  router_logits_grad_kernel<<<grid_for(m), kThreads, 0, ctx.stream>>>(dlogits, probs, experts, dgates, coef, m, E, k);
  check_launch(ctx, op);
}

void gather_rows(const Context& ctx, ActPtr out, ConstActPtr in, const int32_t* rows, const float* scale, int64_t n,
                 int64_t m, int64_t c) {
  const char* op = "gather_rows";
  op_checks::require_permute_shape(op, m, n, c);
  if (n == 0 || c == 0) return;
  with_storage(common_type(op, {out, in}), [&](auto s) {
    using T = decltype(s);
    gather_rows_kernel<T>
        <<<grid_for(n * c), kThreads, 0, ctx.stream>>>(typed<T>(out), typed<T>(in), rows, scale, n, m, c);
  });
  check_launch(ctx, op);
}

void combine_rows(const Context& ctx, ActPtr out, ConstActPtr in, const int32_t* slots, const float* gates, int64_t m,
                  int64_t k, int64_t n, int64_t c) {
  const char* op = "combine_rows";
  op_checks::require_top_k(op, k);
  op_checks::require_permute_shape(op, m, n, c);
  if (m == 0 || c == 0) return;
  with_storage(common_type(op, {out, in}), [&](auto s) {
    using T = decltype(s);
    combine_rows_kernel<T>
        <<<grid_for(m * c), kThreads, 0, ctx.stream>>>(typed<T>(out), typed<T>(in), slots, gates, m, k, n, c);
  });
  check_launch(ctx, op);
}

void combine_gates_grad(const Context& ctx, float* dgates, ConstActPtr dout, ConstActPtr in, const int32_t* slots,
                        int64_t m, int64_t k, int64_t n, int64_t c) {
  const char* op = "combine_gates_grad";
  op_checks::require_top_k(op, k);
  op_checks::require_permute_shape(op, m, n, c);
  if (m == 0) return;
  const int64_t blocks = (m * k + kWarpsPerBlock - 1) / kWarpsPerBlock;
  with_storage(common_type(op, {dout, in}), [&](auto s) {
    using T = decltype(s);
    combine_gates_grad_kernel<T><<<grid_dim(op, "(token, slot) warps", blocks, true), kThreads, 0, ctx.stream>>>(
        dgates, typed<T>(dout), typed<T>(in), slots, m, k, n, c);
  });
  check_launch(ctx, op);
}

}  // namespace axonn::cuda
