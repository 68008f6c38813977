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

  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_to_device(void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) override;
  void memset_zero(void* ptr, size_t bytes) override;
  void fill(float* x, float value, int64_t n) override;
  void synchronize() override;

  void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override;

  void linear_forward(float* y, const float* x, const float* w, const float* bias, int64_t m, int64_t n,
                      int64_t k) override;
  void linear_weight_grad(float* dw, float beta, float* dbias, const float* x, const float* dy, int64_t m, int64_t n,
                          int64_t k) override;
  void linear_gelu_forward(float* pre, float* out, const float* x, const float* w, const float* bias, int64_t m,
                           int64_t n, int64_t k) override;
  void linear_input_grad_gelu(float* dpre, const float* dy, const float* w, const float* pre, int64_t m, int64_t n,
                              int64_t k) override;
  void bias_forward(float* out, const float* bias, int64_t m, int64_t n, int64_t ld) override;
  void bias_backward(float* dbias, const float* dout, int64_t m, int64_t n, int64_t ld) override;
  void add(float* out, const float* a, const float* b, int64_t n) override;
  void scale(float* x, float alpha, int64_t n) override;
  void axpy(float* y, float alpha, const float* x, int64_t n) override;
  void sum(float* out, const float* x, int64_t n) override;
  void sum_squares(float* out, const float* x, int64_t n) override;

  void layernorm_row_sums(float* sums, const float* x, int64_t m, int64_t c) override;
  void layernorm_residual_row_sums(float* x, float* sums, const float* a, const float* b, int64_t m,
                                   int64_t c) override;
  void layernorm_centered_squares(float* mean, float* squares, const float* sums, const float* x, int64_t m, int64_t c,
                                  int64_t C) override;
  void layernorm_normalize(float* out, float* rstd, const float* x, const float* mean, const float* squares,
                           const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C, float eps) override;
  void layernorm_backward_partials(float* partials, const float* dout, const float* x, const float* mean,
                                   const float* rstd, const float* gamma, int64_t m, int64_t c) override;
  void layernorm_backward_finish(float* dx, float* dgamma, float* dbeta, const float* partials, const float* dout,
                                 const float* x, const float* mean, const float* rstd, const float* gamma, int64_t m,
                                 int64_t c, int64_t C) override;
  void layernorm_rows(float* out, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                      int64_t m, int64_t C, float eps) override;
  void residual_layernorm_rows(float* x, float* out, float* mean, float* rstd, const float* a, const float* b,
                               const float* gamma, const float* beta, int64_t m, int64_t C, float eps) override;
  void layernorm_rows_backward(float* dx, float* dgamma, float* dbeta, float* partials, const float* dout,
                               const float* x, const float* mean, const float* rstd, const float* gamma, int64_t m,
                               int64_t C) override;

  void gelu_forward(float* out, const float* x, int64_t n) override;
  void gelu_backward(float* dx, const float* x, const float* dout, int64_t n) override;

  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t ld, int64_t B,
                         int64_t T, int64_t h, int64_t d) override;
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                          const float* q, const float* k, const float* v, int64_t ld, int64_t B, int64_t T, int64_t h,
                          int64_t d) override;

  void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t m, int64_t c, int64_t v0,
                         int64_t v_local) override;
  void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t m, int64_t c, int64_t v0,
                          int64_t v_local) override;
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t c) override;
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t c) override;

  void cross_entropy_row_max(float* row_max, const float* logits, int64_t m, int64_t v_local) override;
  void cross_entropy_partials(float* partials, float* max, float* exps, const float* gathered_max, int64_t groups,
                              const float* logits, const int32_t* targets, int64_t m, int64_t v_local,
                              int64_t v0) override;
  void cross_entropy_loss(float* loss, const float* partials, const float* max, int64_t m) override;
  void cross_entropy_backward(float* dlogits, const float* exps, const float* partials, const int32_t* targets,
                              int64_t m, int64_t v_local, int64_t v0, float scale) override;

  void cross_entropy_rows(float* loss, float* logits, const int32_t* targets, int64_t m, int64_t V, float scale,
                          float* max, float* partials) override;
  void adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
             bool decay) override;

 private:
  struct StreamDeleter {
    void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
  };

  // Declared in construction order; destroyed in reverse (scratch and plans before the
  // stream they were used on).
  int device_;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_;
  std::unique_ptr<cuda::Gemm> gemm_;
  cuda::Scratch scratch_;
  cuda::Context ctx_;
};

}  // namespace axonn
