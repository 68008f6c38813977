#include "trainer/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "trainer/cpu/adamw.hpp"
#include "trainer/cpu/attention.hpp"
#include "trainer/cpu/bias.hpp"
#include "trainer/cpu/check.hpp"
#include "trainer/cpu/cross_entropy.hpp"
#include "trainer/cpu/elementwise.hpp"
#include "trainer/cpu/embedding.hpp"
#include "trainer/cpu/gelu.hpp"
#include "trainer/cpu/gemm.hpp"
#include "trainer/cpu/layernorm.hpp"
#include "trainer/cpu/moe.hpp"
#include "trainer/cpu/reductions.hpp"
#include "trainer/cpu/rmsnorm.hpp"
#include "trainer/cpu/rope.hpp"
#include "trainer/cpu/swiglu.hpp"

namespace axonn {
namespace {

constexpr std::align_val_t kAlignment{64};  // a cache line; also enough for AVX-512 loads

// The pool's thread count: `threads` when positive, else OpenBLAS's default (OPENBLAS_NUM_THREADS
// or all cores), read before the first backend set it to one. OpenBLAS then stays
// single-threaded: the pool runs the GEMMs too (gemm.hpp says why).
int pool_thread_count(int threads) {
  if (threads < 0) cpu::fail("CpuBackend", "threads = " + std::to_string(threads) + " is negative");
  static const int blas_default = std::max(1, openblas_get_num_threads());
  cpu::make_blas_single_threaded();
  return threads > 0 ? threads : blas_default;
}

}  // namespace

CpuBackend::CpuBackend(int threads) : pool_(pool_thread_count(threads)) {}

CpuBackend::~CpuBackend() = default;

void* CpuBackend::alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = ::operator new(bytes, kAlignment, std::nothrow);
  if (p == nullptr) cpu::fail("alloc", "out of host memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

void CpuBackend::free(void* ptr) {
  if (ptr != nullptr) ::operator delete(ptr, kAlignment);
}

void CpuBackend::copy_to_device(void* dst, const void* src_host, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src_host, bytes);
}

void CpuBackend::copy_to_host(void* dst_host, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst_host, src, bytes);
}

void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void CpuBackend::copy_2d(ActPtr dst, int64_t ld_dst, ConstActPtr src, int64_t ld_src, int64_t rows, int64_t cols) {
  cpu::copy_2d(pool_, dst.f32(__func__), ld_dst, src.f32(__func__), ld_src, rows, cols);
}

void CpuBackend::convert(ActPtr dst, const float* src, int64_t n) {
  op_checks::require_nonnegative(__func__, "n", n);
  copy(dst.f32(__func__), src, static_cast<size_t>(n) * sizeof(float));
}

void CpuBackend::memset_zero(void* ptr, size_t bytes) { cpu::zero_bytes(pool_, ptr, bytes); }

void CpuBackend::fill(float* x, float value, int64_t n) { cpu::fill(pool_, x, value, n); }

void CpuBackend::gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, ConstActPtr a,
                      int64_t lda, ConstActPtr b, int64_t ldb, float beta, ActPtr c, int64_t ldc) {
  cpu::gemm(pool_, ta, tb, m, n, k, alpha, a.f32(__func__), lda, b.f32(__func__), ldb, beta, c.f32(__func__), ldc);
}

void CpuBackend::bias_forward(ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  cpu::bias_forward(pool_, out.f32(__func__), bias, m, n, ld);
}

void CpuBackend::bias_backward(float* dbias, ConstActPtr dout, int64_t m, int64_t n, int64_t ld) {
  cpu::bias_backward(pool_, dbias, dout.f32(__func__), m, n, ld);
}

void CpuBackend::add(float* out, const float* a, const float* b, int64_t n) { cpu::add(pool_, out, a, b, n); }
void CpuBackend::scale(float* x, float alpha, int64_t n) { cpu::scale(pool_, x, alpha, n); }
void CpuBackend::axpy(float* y, float alpha, const float* x, int64_t n) { cpu::axpy(pool_, y, alpha, x, n); }
void CpuBackend::sum(float* out, const float* x, int64_t n) { cpu::sum(pool_, block_sums_, out, x, n); }
void CpuBackend::sum_squares(float* out, const float* x, int64_t n) { cpu::sum_squares(pool_, block_sums_, out, x, n); }

void CpuBackend::layernorm_row_sums(float* sums, ConstActPtr x, int64_t m, int64_t c) {
  cpu::layernorm_row_sums(pool_, sums, x.f32(__func__), m, c);
}

void CpuBackend::layernorm_residual_row_sums(ActPtr x, float* sums, ConstActPtr a, ConstActPtr b, int64_t m,
                                             int64_t c) {
  cpu::layernorm_residual_row_sums(pool_, x.f32(__func__), sums, a.f32(__func__), b.f32(__func__), m, c);
}

void CpuBackend::layernorm_centered_squares(float* mean, float* squares, const float* sums, ConstActPtr x, int64_t m,
                                            int64_t c, int64_t C) {
  cpu::layernorm_centered_squares(pool_, mean, squares, sums, x.f32(__func__), m, c, C);
}

void CpuBackend::layernorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* mean, const float* squares,
                                     const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                                     float eps) {
  cpu::layernorm_normalize(pool_, out.f32(__func__), rstd, x.f32(__func__), mean, squares, gamma, beta, m, c, C, eps);
}

void CpuBackend::layernorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* mean,
                                             const float* rstd, const float* gamma, int64_t m, int64_t c) {
  cpu::layernorm_backward_partials(pool_, partials, dout.f32(__func__), x.f32(__func__), mean, rstd, gamma, m, c);
}

void CpuBackend::layernorm_backward_finish(ActPtr dx, float* dgamma, float* dbeta, const float* partials,
                                           ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd,
                                           const float* gamma, int64_t m, int64_t c, int64_t C) {
  cpu::layernorm_backward_finish(pool_, dx.f32(__func__), dgamma, dbeta, partials, dout.f32(__func__), x.f32(__func__),
                                 mean, rstd, gamma, m, c, C);
}

void CpuBackend::rmsnorm_row_squares(float* squares, ConstActPtr x, int64_t m, int64_t c) {
  cpu::rmsnorm_row_squares(pool_, squares, x.f32(__func__), m, c);
}

void CpuBackend::rmsnorm_residual_row_squares(ActPtr x, float* squares, ConstActPtr a, ConstActPtr b, int64_t m,
                                              int64_t c) {
  cpu::rmsnorm_residual_row_squares(pool_, x.f32(__func__), squares, a.f32(__func__), b.f32(__func__), m, c);
}

void CpuBackend::rmsnorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* squares, const float* gamma,
                                   int64_t m, int64_t c, int64_t C, float eps) {
  cpu::rmsnorm_normalize(pool_, out.f32(__func__), rstd, x.f32(__func__), squares, gamma, m, c, C, eps);
}

void CpuBackend::rmsnorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* rstd,
                                           const float* gamma, int64_t m, int64_t c) {
  cpu::rmsnorm_backward_partials(pool_, partials, dout.f32(__func__), x.f32(__func__), rstd, gamma, m, c);
}

void CpuBackend::rmsnorm_backward_finish(ActPtr dx, float* dgamma, const float* partials, ConstActPtr dout,
                                         ConstActPtr x, const float* rstd, const float* gamma, int64_t m, int64_t c,
                                         int64_t C) {
  cpu::rmsnorm_backward_finish(pool_, dx.f32(__func__), dgamma, partials, dout.f32(__func__), x.f32(__func__), rstd,
                               gamma, m, c, C);
}

void CpuBackend::gelu_forward(ActPtr out, ConstActPtr x, int64_t n) {
  cpu::gelu_forward(pool_, out.f32(__func__), x.f32(__func__), n);
}

void CpuBackend::gelu_backward(ActPtr dx, ConstActPtr x, ConstActPtr dout, int64_t n) {
  cpu::gelu_backward(pool_, dx.f32(__func__), x.f32(__func__), dout.f32(__func__), n);
}

void CpuBackend::swiglu_forward(ActPtr out, ConstActPtr gate_up, int64_t m, int64_t f) {
  cpu::swiglu_forward(pool_, out.f32(__func__), gate_up.f32(__func__), m, f);
}

void CpuBackend::swiglu_backward(ActPtr dgate_up, ConstActPtr gate_up, ConstActPtr dout, int64_t m, int64_t f) {
  cpu::swiglu_backward(pool_, dgate_up.f32(__func__), gate_up.f32(__func__), dout.f32(__func__), m, f);
}

void CpuBackend::rope_forward(ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                              int64_t ld) {
  cpu::rope_forward(pool_, x.f32(__func__), cos_sin, B, T, heads, d, ld);
}

void CpuBackend::rope_backward(ActPtr dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                               int64_t ld) {
  cpu::rope_backward(pool_, dx.f32(__func__), cos_sin, B, T, heads, d, ld);
}

void CpuBackend::attention_forward(ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld,
                                   int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  cpu::attention_forward(pool_, out.f32(__func__), lse, q.f32(__func__), k.f32(__func__), v.f32(__func__), ld, B, T, h,
                         kv, d, group_stride, attention_scratch_);
}

void CpuBackend::attention_backward(ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out,
                                    const float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld,
                                    int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  cpu::attention_backward(pool_, dq.f32(__func__), dk.f32(__func__), dv.f32(__func__), dout.f32(__func__),
                          out.f32(__func__), lse, q.f32(__func__), k.f32(__func__), v.f32(__func__), ld, B, T, h, kv, d,
                          group_stride, attention_scratch_);
}

void CpuBackend::embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr table, int64_t m, int64_t c,
                                   int64_t v0, int64_t v_local) {
  cpu::embedding_forward(pool_, out.f32(__func__), tokens, table.f32(__func__), m, c, v0, v_local);
}

void CpuBackend::embedding_backward(float* dtable, ConstActPtr dout, const int32_t* tokens, int64_t m, int64_t c,
                                    int64_t v0, int64_t v_local) {
  cpu::embedding_backward(pool_, dtable, dout.f32(__func__), tokens, m, c, v0, v_local);
}

void CpuBackend::position_forward(ActPtr out, const float* wpe, int64_t B, int64_t T, int64_t c) {
  cpu::position_forward(pool_, out.f32(__func__), wpe, B, T, c);
}

void CpuBackend::position_backward(float* dwpe, ConstActPtr dout, int64_t B, int64_t T, int64_t c) {
  cpu::position_backward(pool_, dwpe, dout.f32(__func__), B, T, c);
}

void CpuBackend::cross_entropy_row_max(float* row_max, ConstActPtr logits, int64_t m, int64_t v_local) {
  cpu::cross_entropy_row_max(pool_, row_max, logits.f32(__func__), m, v_local);
}

void CpuBackend::cross_entropy_partials(float* partials, float* max, ActPtr exps, const float* gathered_max,
                                        int64_t groups, ConstActPtr logits, const int32_t* targets, int64_t m,
                                        int64_t v_local, int64_t v0) {
  cpu::cross_entropy_partials(pool_, partials, max, exps.f32(__func__), gathered_max, groups, logits.f32(__func__),
                              targets, m, v_local, v0);
}

void CpuBackend::cross_entropy_loss(float* loss, const float* partials, const float* max, int64_t m) {
  cpu::cross_entropy_loss(pool_, loss, partials, max, m);
}

void CpuBackend::cross_entropy_backward(ActPtr dlogits, ConstActPtr exps, const float* partials, const int32_t* targets,
                                        int64_t m, int64_t v_local, int64_t v0, float scale) {
  cpu::cross_entropy_backward(pool_, dlogits.f32(__func__), exps.f32(__func__), partials, targets, m, v_local, v0,
                              scale);
}

void CpuBackend::router_logits(float* logits, ConstActPtr x, const float* w, int64_t m, int64_t c, int64_t E) {
  cpu::router_logits(logits, x.f32(__func__), w, m, c, E);
}

void CpuBackend::router_backward(ActPtr dx, float* dw, const float* dlogits, ConstActPtr x, const float* w, int64_t m,
                                 int64_t c, int64_t E) {
  cpu::router_backward(dx.f32(__func__), dw, dlogits, x.f32(__func__), w, m, c, E);
}

void CpuBackend::router_top_k(float* probs, int32_t* experts, float* gates, const float* logits, int64_t m, int64_t E,
                              int64_t k) {
  cpu::router_top_k(pool_, probs, experts, gates, logits, m, E, k);
}

void CpuBackend::router_logits_grad(float* dlogits, const float* probs, const int32_t* experts, const float* dgates,
                                    const float* coef, int64_t m, int64_t E, int64_t k) {
  cpu::router_logits_grad(pool_, dlogits, probs, experts, dgates, coef, m, E, k);
}

void CpuBackend::gather_rows(ActPtr out, ConstActPtr in, const int32_t* rows, const float* scale, int64_t n, int64_t m,
                             int64_t c) {
  cpu::gather_rows(pool_, out.f32(__func__), in.f32(__func__), rows, scale, n, m, c);
}

void CpuBackend::combine_rows(ActPtr out, ConstActPtr in, const int32_t* slots, const float* gates, int64_t m,
                              int64_t k, int64_t n, int64_t c) {
  cpu::combine_rows(pool_, out.f32(__func__), in.f32(__func__), slots, gates, m, k, n, c);
}

void CpuBackend::combine_gates_grad(float* dgates, ConstActPtr dout, ConstActPtr in, const int32_t* slots, int64_t m,
                                    int64_t k, int64_t n, int64_t c) {
  cpu::combine_gates_grad(pool_, dgates, dout.f32(__func__), in.f32(__func__), slots, m, k, n, c);
}

void CpuBackend::adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
                       bool decay) {
  cpu::adamw(pool_, param, grad, m, v, n, step, decay);
}

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace axonn
