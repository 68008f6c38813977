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

// dst (h, T, d) contiguous = the h heads of a (T, h·d) view with row stride ld_src (head e at
// columns [e·d, e·d + d)).
__global__ void gather_heads_kernel(float* dst, const float* src, int64_t ld_src, int64_t T, int64_t h, int64_t d) {
  const int64_t total = h * T * d;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t head = idx / (T * d);
    const int64_t rest = idx - head * T * d;
    const int64_t t = rest / d, e = rest - t * d;
    dst[idx] = src[t * ld_src + head * d + e];
  }
}

// The inverse: the heads of a (T, h·d) view with row stride ld_dst = src (h, T, d).
__global__ void scatter_heads_kernel(float* dst, int64_t ld_dst, const float* src, int64_t T, int64_t h, int64_t d) {
  const int64_t total = h * T * d;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t head = idx / (T * d);
    const int64_t rest = idx - head * T * d;
    const int64_t t = rest / d, e = rest - t * d;
    dst[t * ld_dst + head * d + e] = src[idx];
  }
}

// The per-sequence shapes and the launches shared by forward and backward.
struct Heads {
  const Context& ctx;
  const char* op;
  int64_t T, h, d;

  void gather(float* dst, const float* src, int64_t ld_src) const {
    gather_heads_kernel<<<grid_for(h * T * d), kThreads, 0, ctx.stream>>>(dst, src, ld_src, T, h, d);
    check_launch(ctx, op);
  }
  void scatter(float* dst, int64_t ld_dst, const float* src) const {
    scatter_heads_kernel<<<grid_for(h * T * d), kThreads, 0, ctx.stream>>>(dst, ld_dst, src, T, h, d);
    check_launch(ctx, op);
  }
  // C_e = alpha·op(A_e)·op(B_e) for every head e: contiguous (T, T) or (T, d) matrices, the
  // heads one after another.
  void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float* c, int64_t ldc) const {
    GemmCall call;
    call.ta = ta;
    call.tb = tb;
    call.m = m;
    call.n = n;
    call.k = k;
    call.alpha = alpha;
    call.a = a;
    call.lda = lda;
    call.stride_a = (ta == Transpose::no ? m : k) * lda;
    call.b = b;
    call.ldb = ldb;
    call.stride_b = (tb == Transpose::no ? k : n) * ldb;
    call.beta = 0.0f;
    call.c = c;
    call.ldc = ldc;
    call.stride_c = m * ldc;
    call.batch = h;
    ctx.gemm->run(ctx, op, call);
  }
};

}  // namespace

void attention_forward(const Context& ctx, float* out, float* probs, const float* q, const float* k, const float* v,
                       int64_t ld, int64_t B, int64_t T, int64_t h, int64_t d) {
  const char* op = "attention_forward";
  require_shape(op, ld, B, T, h, d);
  if (B == 0 || T == 0 || h == 0) return;
  const int64_t hd = h * d, TT = T * T, Td = T * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ScratchLayout layout;
  const size_t head_bytes = static_cast<size_t>(h * Td) * sizeof(float);  // one (h, T, d) buffer
  const size_t q_at = layout.add(head_bytes), k_at = layout.add(head_bytes), v_at = layout.add(head_bytes);
  const size_t o_at = layout.add(head_bytes);
  auto* base = static_cast<char*>(ctx.scratch->get(ctx.stream, layout.total(), op));
  auto* qh = reinterpret_cast<float*>(base + q_at);
  auto* kh = reinterpret_cast<float*>(base + k_at);
  auto* vh = reinterpret_cast<float*>(base + v_at);
  auto* oh = reinterpret_cast<float*>(base + o_at);
  const Heads heads{ctx, op, T, h, d};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t offset = b * T * ld;  // sequence b of q, k, v; head e at + e·d
    float* p = probs + b * h * TT;      // (h, T, T)
    heads.gather(qh, q + offset, ld);
    heads.gather(kh, k + offset, ld);
    heads.gather(vh, v + offset, ld);
    // S (T, T) = Q · K^T / sqrt(d), per head
    heads.gemm(Transpose::no, Transpose::yes, T, T, d, scale, qh, d, kh, d, p, T);
    softmax_causal_kernel<<<grid_dim(op, "score rows", h * T, true), kThreads, 0, ctx.stream>>>(p, T);
    check_launch(ctx, op);
    // O (T, d) = P · V, per head, then into out's (T, h·d) rows
    heads.gemm(Transpose::no, Transpose::no, T, d, T, 1.0f, p, T, vh, d, oh, d);
    heads.scatter(out + b * T * hd, hd, oh);
  }
}

void attention_backward(const Context& ctx, float* dq, float* dk, float* dv, const float* dout, const float* probs,
                        const float* q, const float* k, const float* v, int64_t ld, int64_t B, int64_t T, int64_t h,
                        int64_t d) {
  const char* op = "attention_backward";
  require_shape(op, ld, B, T, h, d);
  if (B == 0 || T == 0 || h == 0) return;
  const int64_t hd = h * d, TT = T * T, Td = T * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ScratchLayout layout;
  const size_t head_bytes = static_cast<size_t>(h * Td) * sizeof(float);
  const size_t ds_at = layout.add(static_cast<size_t>(h * TT) * sizeof(float));  // dP, then dS (h, T, T)
  const size_t q_at = layout.add(head_bytes), k_at = layout.add(head_bytes), v_at = layout.add(head_bytes);
  const size_t do_at = layout.add(head_bytes), r_at = layout.add(head_bytes);  // dO, one result
  auto* base = static_cast<char*>(ctx.scratch->get(ctx.stream, layout.total(), op));
  auto* ds = reinterpret_cast<float*>(base + ds_at);
  auto* qh = reinterpret_cast<float*>(base + q_at);
  auto* kh = reinterpret_cast<float*>(base + k_at);
  auto* vh = reinterpret_cast<float*>(base + v_at);
  auto* doh = reinterpret_cast<float*>(base + do_at);
  auto* rh = reinterpret_cast<float*>(base + r_at);
  const Heads heads{ctx, op, T, h, d};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t offset = b * T * ld;
    const float* p = probs + b * h * TT;
    heads.gather(qh, q + offset, ld);
    heads.gather(kh, k + offset, ld);
    heads.gather(vh, v + offset, ld);
    heads.gather(doh, dout + b * T * hd, hd);
    // dP (T, T) = dO · V^T, then dS in place
    heads.gemm(Transpose::no, Transpose::yes, T, T, d, 1.0f, doh, d, vh, d, ds, T);
    softmax_backward_kernel<<<grid_dim(op, "score rows", h * T, true), kThreads, 0, ctx.stream>>>(ds, p, T);
    check_launch(ctx, op);
    // dQ (T, d) = dS · K / sqrt(d)
    heads.gemm(Transpose::no, Transpose::no, T, d, T, scale, ds, T, kh, d, rh, d);
    heads.scatter(dq + offset, ld, rh);
    // dK (T, d) = dS^T · Q / sqrt(d)
    heads.gemm(Transpose::yes, Transpose::no, T, d, T, scale, ds, T, qh, d, rh, d);
    heads.scatter(dk + offset, ld, rh);
    // dV (T, d) = P^T · dO
    heads.gemm(Transpose::yes, Transpose::no, T, d, T, 1.0f, p, T, doh, d, rh, d);
    heads.scatter(dv + offset, ld, rh);
  }
}

}  // namespace axonn::cuda
