#pragma once
// The CUDA backend class behind make_cuda_backend (cuda_backend.hpp): every op of Backend on
// one GPU, ordered on one non-blocking compute stream. Internal to trainer/cuda (it needs the
// CUDA headers); the rest of the trainer holds it as a Backend. Not thread-safe: one
// backend per rank, used from the thread that created it.
#include <cuda_runtime_api.h>

#include <memory>

#include "trainer/backend.hpp"
#include "trainer/cuda/context.hpp"
#include "trainer/cuda/cuda_backend.hpp"
#include "trainer/cuda/gemm.hpp"

namespace axonn {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  bool device_is_host() const override { return false; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  GemmMath gemm_math() const { return gemm_->math(); }
  ElementType activation_type() const override { return activations_; }

  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_to_device(void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_2d(ActPtr dst, int64_t ld_dst, ConstActPtr src, int64_t ld_src, int64_t rows, int64_t cols) override;
  void convert(ActPtr dst, const float* src, int64_t n) override;
  void memset_zero(void* ptr, size_t bytes) override;
  void fill(float* x, float value, int64_t n) override;
  void synchronize() override;
  std::unique_ptr<TimingMark> timing_mark() override;

  void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, ConstActPtr a, int64_t lda,
            ConstActPtr b, int64_t ldb, float beta, ActPtr c, int64_t ldc) override;

  void linear_forward(ActPtr y, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m, int64_t n,
                      int64_t k) override;
  void linear_weight_grad(float* dw, float beta, float* dbias, ConstActPtr x, ConstActPtr dy, int64_t m, int64_t n,
                          int64_t k) override;
  void linear_gelu_forward(ActPtr pre, ActPtr out, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m,
                           int64_t n, int64_t k) override;
  void linear_input_grad_gelu(ActPtr dpre, ConstActPtr dy, ConstActPtr w, ConstActPtr pre, int64_t m, int64_t n,
                              int64_t k) override;
  void bias_forward(ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld) override;
  void bias_backward(float* dbias, ConstActPtr dout, int64_t m, int64_t n, int64_t ld) override;
  void add(float* out, const float* a, const float* b, int64_t n) override;
  void scale(float* x, float alpha, int64_t n) override;
  void axpy(float* y, float alpha, const float* x, int64_t n) override;
  void sum(float* out, const float* x, int64_t n) override;
  void sum_squares(float* out, const float* x, int64_t n) override;

  void layernorm_row_sums(float* sums, ConstActPtr x, int64_t m, int64_t c) override;
  void layernorm_residual_row_sums(ActPtr x, float* sums, ConstActPtr a, ConstActPtr b, int64_t m, int64_t c) override;
  void layernorm_centered_squares(float* mean, float* squares, const float* sums, ConstActPtr x, int64_t m, int64_t c,
                                  int64_t C) override;
  void layernorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* mean, const float* squares,
                           const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C, float eps) override;
  void layernorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* mean,
                                   const float* rstd, const float* gamma, int64_t m, int64_t c) override;
  void layernorm_backward_finish(ActPtr dx, float* dgamma, float* dbeta, const float* partials, ConstActPtr dout,
                                 ConstActPtr x, const float* mean, const float* rstd, const float* gamma, int64_t m,
                                 int64_t c, int64_t C) override;
  void layernorm_rows(ActPtr out, float* mean, float* rstd, ConstActPtr x, const float* gamma, const float* beta,
                      int64_t m, int64_t C, float eps) override;
  void residual_layernorm_rows(ActPtr x, ActPtr out, float* mean, float* rstd, ConstActPtr a, ConstActPtr b,
                               const float* gamma, const float* beta, int64_t m, int64_t C, float eps) override;
  void layernorm_rows_backward(ActPtr dx, float* dgamma, float* dbeta, float* partials, ConstActPtr dout, ConstActPtr x,
                               const float* mean, const float* rstd, const float* gamma, int64_t m, int64_t C) override;

  void rmsnorm_row_squares(float* squares, ConstActPtr x, int64_t m, int64_t c) override;
  void rmsnorm_residual_row_squares(ActPtr x, float* squares, ConstActPtr a, ConstActPtr b, int64_t m,
                                    int64_t c) override;
  void rmsnorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* squares, const float* gamma, int64_t m,
                         int64_t c, int64_t C, float eps) override;
  void rmsnorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* rstd,
                                 const float* gamma, int64_t m, int64_t c) override;
  void rmsnorm_backward_finish(ActPtr dx, float* dgamma, const float* partials, ConstActPtr dout, ConstActPtr x,
                               const float* rstd, const float* gamma, int64_t m, int64_t c, int64_t C) override;
  void rmsnorm_rows(ActPtr out, float* rstd, ConstActPtr x, const float* gamma, int64_t m, int64_t C,
                    float eps) override;
  void residual_rmsnorm_rows(ActPtr x, ActPtr out, float* rstd, ConstActPtr a, ConstActPtr b, const float* gamma,
                             int64_t m, int64_t C, float eps) override;
  void rmsnorm_rows_backward(ActPtr dx, float* dgamma, float* partials, ConstActPtr dout, ConstActPtr x,
                             const float* rstd, const float* gamma, int64_t m, int64_t C) override;

  void gelu_forward(ActPtr out, ConstActPtr x, int64_t n) override;
  void gelu_backward(ActPtr dx, ConstActPtr x, ConstActPtr dout, int64_t n) override;

  void swiglu_forward(ActPtr out, ConstActPtr gate_up, int64_t m, int64_t f) override;
  void swiglu_backward(ActPtr dgate_up, ConstActPtr gate_up, ConstActPtr dout, int64_t m, int64_t f) override;
  void rope_forward(ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                    int64_t ld) override;
  void rope_backward(ActPtr dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                     int64_t ld) override;

  void attention_forward(ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B,
                         int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) override;
  void attention_backward(ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out, const float* lse,
                          ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B, int64_t T, int64_t h,
                          int64_t kv, int64_t d, int64_t group_stride) override;

  void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr table, int64_t m, int64_t c, int64_t v0,
                         int64_t v_local) override;
  void embedding_backward(float* dtable, ConstActPtr dout, const int32_t* tokens, int64_t m, int64_t c, int64_t v0,
                          int64_t v_local) override;
  void position_forward(ActPtr out, const float* wpe, int64_t B, int64_t T, int64_t c) override;
  void position_backward(float* dwpe, ConstActPtr dout, int64_t B, int64_t T, int64_t c) override;

  void cross_entropy_row_max(float* row_max, ConstActPtr logits, int64_t m, int64_t v_local) override;
  void cross_entropy_partials(float* partials, float* max, ActPtr exps, const float* gathered_max, int64_t groups,
                              ConstActPtr logits, const int32_t* targets, int64_t m, int64_t v_local,
                              int64_t v0) override;
  void cross_entropy_loss(float* loss, const float* partials, const float* max, int64_t m) override;
  void cross_entropy_backward(ActPtr dlogits, ConstActPtr exps, const float* partials, const int32_t* targets,
                              int64_t m, int64_t v_local, int64_t v0, float scale) override;

  void cross_entropy_rows(float* loss, ActPtr logits, const int32_t* targets, int64_t m, int64_t V, float scale,
                          float* max, float* partials) override;
  void router_logits(float* logits, ConstActPtr x, const float* w, int64_t m, int64_t c, int64_t E) override;
  void router_backward(ActPtr dx, float* dw, const float* dlogits, ConstActPtr x, const float* w, int64_t m, int64_t c,
                       int64_t E) override;
  void router_top_k(float* probs, int32_t* experts, float* gates, const float* logits, int64_t m, int64_t E,
                    int64_t k) override;
  void router_logits_grad(float* dlogits, const float* probs, const int32_t* experts, const float* dgates,
                          const float* coef, int64_t m, int64_t E, int64_t k) override;
  void gather_rows(ActPtr out, ConstActPtr in, const int32_t* rows, const float* scale, int64_t n, int64_t m,
                   int64_t c) override;
  void combine_rows(ActPtr out, ConstActPtr in, const int32_t* slots, const float* gates, int64_t m, int64_t k,
                    int64_t n, int64_t c) override;
  void combine_gates_grad(float* dgates, ConstActPtr dout, ConstActPtr in, const int32_t* slots, int64_t m, int64_t k,
                          int64_t n, int64_t c) override;
  void adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
             bool decay) override;

 private:
  struct StreamDeleter {
    void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
  };

  // Declared in construction order; destroyed in reverse (scratch and plans before the
  // stream they were used on).
  int device_;
  ElementType activations_;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_;
  std::unique_ptr<cuda::Gemm> gemm_;
  cuda::Scratch scratch_;
  cuda::Context ctx_;
};

}  // namespace axonn
