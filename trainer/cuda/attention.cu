#include <cmath>

#include "trainer/cuda/attention.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/gemm.hpp"

namespace axonn::cuda {
namespace {

void require_shape(const char* op, int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d) {
  require_nonnegative(op, "B", B);
  require_nonnegative(op, "T", T);
  require_nonnegative(op, "h", h);
  require_positive(op, "d", d);
  require_at_most(op, "h·d", h * d, "row stride ld", ld);
}

// Row p of the (rows, T) scores, query position t = p % T, in place: softmax over the keys
// j <= t, 0 for j > t. One block per row.
__global__ void softmax_causal_kernel(float* scores, int64_t T) {
  __shared__ float shared_max[kWarpSize];
  __shared__ float shared_sum[kWarpSize];
  const int64_t p = blockIdx.x;
  const int64_t t = p % T;
  float* row = scores + p * T;
  float mx = neg_inf();
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) mx = row[j] > mx ? row[j] : mx;
  mx = block_max(mx, shared_max);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    s += e;
  }
  s = block_sum(s, shared_sum);
  const float inv = 1.0f / s;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? row[j] * inv : 0.0f;
}

// Row p of dP (rows, T), in place -> dS = P ⊙ (dP − Σ_{j<=t} P·dP) for j <= t, 0 above the
// diagonal. One block per row.
__global__ void softmax_backward_kernel(float* dp, const float* probs, int64_t T) {
  __shared__ float shared[kWarpSize];
  const int64_t p = blockIdx.x;
  const int64_t t = p % T;
  float* row = dp + p * T;
  const float* prow = probs + p * T;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) dot += prow[j] * row[j];
  dot = block_sum(dot, shared);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? prow[j] * (row[j] - dot) : 0.0f;
}

// dst (T, h·d) view with row stride ld_dst, head e's columns [e·d, e·d + d) = src (h, T, d).
__global__ void scatter_heads_kernel(float* dst, int64_t ld_dst, const float* src, int64_t T, int64_t h, int64_t d) {
  const int64_t total = h * T * d;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t head = idx / (T * d);
    const int64_t rest = idx - head * T * d;
    const int64_t t = rest / d, e = rest - t * d;
    dst[t * ld_dst + head * d + e] = src[idx];
  }
}

// One GEMM per sequence, batched over the heads.
struct HeadGemm {
  const Context& ctx;
  const char* op;
  int64_t h;
  void operator()(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float* c, int64_t ldc,
                  int64_t stride_c) const {
    GemmCall call;
    call.ta = ta;
    call.tb = tb;
    call.m = m;
    call.n = n;
    call.k = k;
    call.alpha = alpha;
    call.a = a;
    call.lda = lda;
    call.stride_a = stride_a;
    call.b = b;
    call.ldb = ldb;
    call.stride_b = stride_b;
    call.beta = 0.0f;
    call.c = c;
    call.ldc = ldc;
    call.stride_c = stride_c;
    call.batch = h;
    ctx.gemm->run(ctx, op, call);
  }
};

void scatter_heads(const Context& ctx, const char* op, float* dst, int64_t ld_dst, const float* src, int64_t T,
                   int64_t h, int64_t d) {
  scatter_heads_kernel<<<grid_for(h * T * d), kThreads, 0, ctx.stream>>>(dst, ld_dst, src, T, h, d);
  check_launch(ctx, op);
}

}  // namespace

void attention_forward(const Context& ctx, float* out, float* probs, const float* q, const float* k, const float* v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d) {
  const char* op = "attention_forward";
  require_shape(op, ld, B, T, h, d);
  if (B == 0 || T == 0 || h == 0) return;
  const int64_t hd = h * d, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto* o_heads = static_cast<float*>(ctx.scratch->get(ctx.stream, static_cast<size_t>(h * T * d) * sizeof(float), op));
  const HeadGemm gemm{ctx, op, h};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t offset = b * T * ld;  // head e of sequence b starts at offset + e·d
    float* p = probs + b * h * TT;      // (h, T, T)
    // S (T, T) = Q · K^T / sqrt(d), per head
    gemm(Transpose::no, Transpose::yes, T, T, d, scale, q + offset, ld, d, k + offset, ld, d, p, T, TT);
    softmax_causal_kernel<<<grid_dim(op, "score rows", h * T, true), kThreads, 0, ctx.stream>>>(p, T);
    check_launch(ctx, op);
    // O (T, d) = P · V, per head, into (h, T, d), then into out's (T, h·d) rows
    gemm(Transpose::no, Transpose::no, T, d, T, 1.0f, p, T, TT, v + offset, ld, d, o_heads, d, T * d);
    scatter_heads(ctx, op, out + b * T * hd, hd, o_heads, T, h, d);
  }
}

void attention_backward(const Context& ctx, float* dq, float* dk, float* dv, const float* dout, const float* probs,
                        const float* q, const float* k, const float* v, int64_t ld, int64_t B, int64_t T, int64_t h,
                        int64_t d) {
  const char* op = "attention_backward";
  require_shape(op, ld, B, T, h, d);
  if (B == 0 || T == 0 || h == 0) return;
  const int64_t hd = h * d, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ScratchLayout layout;
  const size_t ds_at = layout.add(static_cast<size_t>(h * TT) * sizeof(float));        // dP, then dS (h, T, T)
  const size_t heads_at = layout.add(static_cast<size_t>(h * T * d) * sizeof(float));  // one result (h, T, d)
  auto* base = static_cast<char*>(ctx.scratch->get(ctx.stream, layout.total(), op));
  auto* ds = reinterpret_cast<float*>(base + ds_at);
  auto* heads = reinterpret_cast<float*>(base + heads_at);
  const HeadGemm gemm{ctx, op, h};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t offset = b * T * ld;
    const float* p = probs + b * h * TT;
    const float* dO = dout + b * T * hd;  // head e at dO + e·d, row stride h·d
    // dP (T, T) = dO · V^T
    gemm(Transpose::no, Transpose::yes, T, T, d, 1.0f, dO, hd, d, v + offset, ld, d, ds, T, TT);
    softmax_backward_kernel<<<grid_dim(op, "score rows", h * T, true), kThreads, 0, ctx.stream>>>(ds, p, T);
    check_launch(ctx, op);
    // dQ (T, d) = dS · K / sqrt(d)
    gemm(Transpose::no, Transpose::no, T, d, T, scale, ds, T, TT, k + offset, ld, d, heads, d, T * d);
    scatter_heads(ctx, op, dq + offset, ld, heads, T, h, d);
    // dK (T, d) = dS^T · Q / sqrt(d)
    gemm(Transpose::yes, Transpose::no, T, d, T, scale, ds, T, TT, q + offset, ld, d, heads, d, T * d);
    scatter_heads(ctx, op, dk + offset, ld, heads, T, h, d);
    // dV (T, d) = P^T · dO
    gemm(Transpose::yes, Transpose::no, T, d, T, 1.0f, p, T, TT, dO, hd, d, heads, d, T * d);
    scatter_heads(ctx, op, dv + offset, ld, heads, T, h, d);
  }
}

}  // namespace axonn::cuda
