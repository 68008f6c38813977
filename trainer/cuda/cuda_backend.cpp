#include "trainer/cuda/cuda_backend.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "trainer/cuda/adamw.hpp"
#include "trainer/cuda/attention.hpp"
#include "trainer/cuda/bias.hpp"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/cross_entropy.hpp"
#include "trainer/cuda/cuda_backend_impl.hpp"
#include "trainer/cuda/elementwise.hpp"
#include "trainer/cuda/embedding.hpp"
#include "trainer/cuda/gelu.hpp"
#include "trainer/cuda/layernorm.hpp"
#include "trainer/cuda/moe.hpp"
#include "trainer/cuda/reductions.hpp"
#include "trainer/cuda/rmsnorm.hpp"
#include "trainer/cuda/rope.hpp"
#include "trainer/cuda/swiglu.hpp"

namespace axonn {
namespace {

// Checks that options.device exists, makes it current, and returns it.
int use_device(int device) {
  const char* op = "make_cuda_backend";
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cuda::fail(op, "CUDA device " + std::to_string(device) +
                       " is not usable: cudaGetDeviceCount failed: " + cuda::error_text(e));
  }
  if (device < 0 || device >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    cuda::fail(op, "CUDA device " + std::to_string(device) + " does not exist: this process sees " +
                       std::to_string(count) +
                       " device(s) (CUDA_VISIBLE_DEVICES=" + (visible != nullptr ? visible : "unset") + ")");
  }
  AXONN_CUDA_OP_CHECK(op, cudaSetDevice(device));
  return device;
}

cudaStream_t create_stream() {
  cudaStream_t s = nullptr;
  // Non-blocking: it does not synchronize with the legacy default stream, so other code's
  // work there (NCCL set-up, a library's copies) does not serialize with the step.
  AXONN_CUDA_OP_CHECK("make_cuda_backend", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

bool sync_each_op_from_env() {
  const char* v = std::getenv("AXONN_CUDA_SYNC_OPS");
  return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

}  // namespace

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : device_(use_device(options.device)),
      activations_(options.activations),
      stream_(create_stream()),
      gemm_(std::make_unique<cuda::Gemm>(options.gemm_math, options.gemm_candidates)) {
  ctx_.stream = stream_.get();
  ctx_.scratch = &scratch_;
  ctx_.gemm = gemm_.get();
  ctx_.sync_each_op = sync_each_op_from_env();
}

CudaBackend::~CudaBackend() {
  // Queued ops may still use the scratch and the GEMM workspace freed below. Errors are
  // ignored: a destructor does not throw, and a device in error has nothing left to wait for.
  (void)cudaStreamSynchronize(stream_.get());
}

// ---- memory. cudaMalloc, not the stream-ordered allocator: buffers are allocated once at
// set-up, and a plain allocation has no ordering rule for other streams (NCCL) to break.
void* CudaBackend::alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);  // 256-byte aligned
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cuda::fail("alloc", "cudaMalloc of " + std::to_string(bytes) + " bytes failed on CUDA device " +
                            std::to_string(device_) + ": " + cuda::error_text(e));
  }
  return p;
}

// Never throws (it runs in destructors). Waits for the stream first: queued ops may still
// read or write the buffer. A failure (a pointer not from alloc, a device already in error)
// stays in the runtime's last-error slot, and the next op's launch check reports it.
void CudaBackend::free(void* ptr) {
  if (ptr == nullptr) return;
  (void)cudaStreamSynchronize(stream_.get());
  (void)cudaFree(ptr);
}

// Asynchronous on the stream. From pageable memory (std::vector) the runtime has copied the
// source to a staging buffer when the call returns, so the source may be reused at once.
void CudaBackend::copy_to_device(void* dst, const void* src_host, size_t bytes) {
  if (bytes == 0) return;
  AXONN_CUDA_OP_CHECK("copy_to_device", cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_.get()));
}

void CudaBackend::copy_to_host(void* dst_host, const void* src, size_t bytes) {
  if (bytes == 0) return;
  AXONN_CUDA_OP_CHECK("copy_to_host", cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  AXONN_CUDA_OP_CHECK("copy_to_host", cudaStreamSynchronize(stream_.get()));
}

// Overlapping ranges are allowed, as the CPU backend's memmove allows them; cudaMemcpy's are
// not, so those go through scratch.
void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + bytes && s < d + bytes) {
    void* staged = scratch_.get(stream_.get(), bytes, "copy");
    AXONN_CUDA_OP_CHECK("copy", cudaMemcpyAsync(staged, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
    src = staged;
  }
  AXONN_CUDA_OP_CHECK("copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
}

void CudaBackend::copy_2d(ActPtr dst, int64_t ld_dst, ConstActPtr src, int64_t ld_src, int64_t rows, int64_t cols) {
  cuda::require_nonnegative("copy_2d", "rows", rows);
  cuda::require_nonnegative("copy_2d", "cols", cols);
  cuda::require_at_most("copy_2d", "cols", cols, "ld_dst", ld_dst);
  cuda::require_at_most("copy_2d", "cols", cols, "ld_src", ld_src);
  if (rows == 0 || cols == 0) return;
  if (dst.type() != src.type())
    cuda::fail("copy_2d", std::string("copies bytes: dst is ") + element_type_name(dst.type()) + " and src " +
                              element_type_name(src.type()) + "; pass both in one type");
  const size_t e = dst.element_bytes();
  AXONN_CUDA_OP_CHECK("copy_2d", cudaMemcpy2DAsync(dst.raw(), static_cast<size_t>(ld_dst) * e, src.raw(),
                                                   static_cast<size_t>(ld_src) * e, static_cast<size_t>(cols) * e,
                                                   static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_.get()));
}

void CudaBackend::convert(ActPtr dst, const float* src, int64_t n) { cuda::convert(ctx_, dst, src, n); }

void CudaBackend::memset_zero(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  AXONN_CUDA_OP_CHECK("memset_zero", cudaMemsetAsync(ptr, 0, bytes, stream_.get()));
}

void CudaBackend::fill(float* x, float value, int64_t n) { cuda::fill(ctx_, x, value, n); }

void CudaBackend::synchronize() { AXONN_CUDA_OP_CHECK("synchronize", cudaStreamSynchronize(stream_.get())); }

namespace {

// A CUDA event (with timing) recorded on the compute stream; destroyed with the mark.
class CudaTimingMark final : public TimingMark {
 public:
  explicit CudaTimingMark(cudaStream_t stream) {
    AXONN_CUDA_OP_CHECK("timing_mark", cudaEventCreate(&event_));
    const cudaError_t recorded = cudaEventRecord(event_, stream);
    if (recorded != cudaSuccess) {
      cudaEventDestroy(event_);
      AXONN_CUDA_OP_CHECK("timing_mark", recorded);
    }
  }
  ~CudaTimingMark() override { cudaEventDestroy(event_); }
  CudaTimingMark(const CudaTimingMark&) = delete;
  CudaTimingMark& operator=(const CudaTimingMark&) = delete;

  double seconds_since(const TimingMark& earlier) const override {
    float ms = 0;
    AXONN_CUDA_OP_CHECK("timing_mark",
                        cudaEventElapsedTime(&ms, static_cast<const CudaTimingMark&>(earlier).event_, event_));
    return static_cast<double>(ms) / 1e3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::unique_ptr<TimingMark> CudaBackend::timing_mark() { return std::make_unique<CudaTimingMark>(stream_.get()); }

// ---- compute: each op checks its arguments and launches on the stream (trainer/cuda/<op>).
void CudaBackend::gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, ConstActPtr a,
                       int64_t lda, ConstActPtr b, int64_t ldb, float beta, ActPtr c, int64_t ldc) {
  cuda::gemm(ctx_, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void CudaBackend::linear_forward(ActPtr y, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m, int64_t n,
                                 int64_t k) {
  cuda::linear_forward(ctx_, y, x, w, bias, m, n, k);
}

void CudaBackend::linear_weight_grad(float* dw, float beta, float* dbias, ConstActPtr x, ConstActPtr dy, int64_t m,
                                     int64_t n, int64_t k) {
  cuda::linear_weight_grad(ctx_, dw, beta, dbias, x, dy, m, n, k);
}

void CudaBackend::linear_gelu_forward(ActPtr pre, ActPtr out, ConstActPtr x, ConstActPtr w, const float* bias,
                                      int64_t m, int64_t n, int64_t k) {
  cuda::linear_gelu_forward(ctx_, pre, out, x, w, bias, m, n, k);
}

void CudaBackend::linear_input_grad_gelu(ActPtr dpre, ConstActPtr dy, ConstActPtr w, ConstActPtr pre, int64_t m,
                                         int64_t n, int64_t k) {
  cuda::linear_input_grad_gelu(ctx_, dpre, dy, w, pre, m, n, k);
}

void CudaBackend::bias_forward(ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld) {
  cuda::bias_forward(ctx_, out, bias, m, n, ld);
}

void CudaBackend::bias_backward(float* dbias, ConstActPtr dout, int64_t m, int64_t n, int64_t ld) {
  cuda::bias_backward(ctx_, dbias, dout, m, n, ld);
}

void CudaBackend::add(float* out, const float* a, const float* b, int64_t n) { cuda::add(ctx_, out, a, b, n); }
void CudaBackend::scale(float* x, float alpha, int64_t n) { cuda::scale(ctx_, x, alpha, n); }
void CudaBackend::axpy(float* y, float alpha, const float* x, int64_t n) { cuda::axpy(ctx_, y, alpha, x, n); }
void CudaBackend::sum(float* out, const float* x, int64_t n) { cuda::sum(ctx_, out, x, n); }
void CudaBackend::sum_squares(float* out, const float* x, int64_t n) { cuda::sum_squares(ctx_, out, x, n); }

void CudaBackend::layernorm_row_sums(float* sums, ConstActPtr x, int64_t m, int64_t c) {
  cuda::layernorm_row_sums(ctx_, sums, x, m, c);
}

void CudaBackend::layernorm_residual_row_sums(ActPtr x, float* sums, ConstActPtr a, ConstActPtr b, int64_t m,
                                              int64_t c) {
  cuda::layernorm_residual_row_sums(ctx_, x, sums, a, b, m, c);
}

void CudaBackend::layernorm_centered_squares(float* mean, float* squares, const float* sums, ConstActPtr x, int64_t m,
                                             int64_t c, int64_t C) {
  cuda::layernorm_centered_squares(ctx_, mean, squares, sums, x, m, c, C);
}

void CudaBackend::layernorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* mean, const float* squares,
                                      const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                                      float eps) {
  cuda::layernorm_normalize(ctx_, out, rstd, x, mean, squares, gamma, beta, m, c, C, eps);
}

void CudaBackend::layernorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* mean,
                                              const float* rstd, const float* gamma, int64_t m, int64_t c) {
  cuda::layernorm_backward_partials(ctx_, partials, dout, x, mean, rstd, gamma, m, c);
}

void CudaBackend::layernorm_backward_finish(ActPtr dx, float* dgamma, float* dbeta, const float* partials,
                                            ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd,
                                            const float* gamma, int64_t m, int64_t c, int64_t C) {
  cuda::layernorm_backward_finish(ctx_, dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, c, C);
}

void CudaBackend::layernorm_rows(ActPtr out, float* mean, float* rstd, ConstActPtr x, const float* gamma,
                                 const float* beta, int64_t m, int64_t C, float eps) {
  cuda::layernorm_rows(ctx_, out, mean, rstd, x, gamma, beta, m, C, eps);
}

void CudaBackend::residual_layernorm_rows(ActPtr x, ActPtr out, float* mean, float* rstd, ConstActPtr a, ConstActPtr b,
                                          const float* gamma, const float* beta, int64_t m, int64_t C, float eps) {
  cuda::residual_layernorm_rows(ctx_, x, out, mean, rstd, a, b, gamma, beta, m, C, eps);
}

void CudaBackend::layernorm_rows_backward(ActPtr dx, float* dgamma, float* dbeta, float* partials, ConstActPtr dout,
                                          ConstActPtr x, const float* mean, const float* rstd, const float* gamma,
                                          int64_t m, int64_t C) {
  cuda::layernorm_rows_backward(ctx_, dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, C);
}

void CudaBackend::rmsnorm_row_squares(float* squares, ConstActPtr x, int64_t m, int64_t c) {
  cuda::rmsnorm_row_squares(ctx_, squares, x, m, c);
}

void CudaBackend::rmsnorm_residual_row_squares(ActPtr x, float* squares, ConstActPtr a, ConstActPtr b, int64_t m,
                                               int64_t c) {
  cuda::rmsnorm_residual_row_squares(ctx_, x, squares, a, b, m, c);
}

void CudaBackend::rmsnorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* squares, const float* gamma,
                                    int64_t m, int64_t c, int64_t C, float eps) {
  cuda::rmsnorm_normalize(ctx_, out, rstd, x, squares, gamma, m, c, C, eps);
}

void CudaBackend::rmsnorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* rstd,
                                            const float* gamma, int64_t m, int64_t c) {
  cuda::rmsnorm_backward_partials(ctx_, partials, dout, x, rstd, gamma, m, c);
}

void CudaBackend::rmsnorm_backward_finish(ActPtr dx, float* dgamma, const float* partials, ConstActPtr dout,
                                          ConstActPtr x, const float* rstd, const float* gamma, int64_t m, int64_t c,
                                          int64_t C) {
  cuda::rmsnorm_backward_finish(ctx_, dx, dgamma, partials, dout, x, rstd, gamma, m, c, C);
}

void CudaBackend::rmsnorm_rows(ActPtr out, float* rstd, ConstActPtr x, const float* gamma, int64_t m, int64_t C,
                               float eps) {
  cuda::rmsnorm_rows(ctx_, out, rstd, x, gamma, m, C, eps);
}

void CudaBackend::residual_rmsnorm_rows(ActPtr x, ActPtr out, float* rstd, ConstActPtr a, ConstActPtr b,
                                        const float* gamma, int64_t m, int64_t C, float eps) {
  cuda::residual_rmsnorm_rows(ctx_, x, out, rstd, a, b, gamma, m, C, eps);
}

void CudaBackend::rmsnorm_rows_backward(ActPtr dx, float* dgamma, float* partials, ConstActPtr dout, ConstActPtr x,
                                        const float* rstd, const float* gamma, int64_t m, int64_t C) {
  cuda::rmsnorm_rows_backward(ctx_, dx, dgamma, partials, dout, x, rstd, gamma, m, C);
}

void CudaBackend::gelu_forward(ActPtr out, ConstActPtr x, int64_t n) { cuda::gelu_forward(ctx_, out, x, n); }

void CudaBackend::gelu_backward(ActPtr dx, ConstActPtr x, ConstActPtr dout, int64_t n) {
  cuda::gelu_backward(ctx_, dx, x, dout, n);
}

void CudaBackend::swiglu_forward(ActPtr out, ConstActPtr gate_up, int64_t m, int64_t f) {
  cuda::swiglu_forward(ctx_, out, gate_up, m, f);
}

void CudaBackend::swiglu_backward(ActPtr dgate_up, ConstActPtr gate_up, ConstActPtr dout, int64_t m, int64_t f) {
  cuda::swiglu_backward(ctx_, dgate_up, gate_up, dout, m, f);
}

void CudaBackend::rope_forward(ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                               int64_t ld) {
  cuda::rope_forward(ctx_, x, cos_sin, B, T, heads, d, ld);
}

void CudaBackend::rope_backward(ActPtr dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                                int64_t ld) {
  cuda::rope_backward(ctx_, dx, cos_sin, B, T, heads, d, ld);
}

void CudaBackend::attention_forward(ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld,
                                    int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  cuda::attention_forward(ctx_, out, lse, q, k, v, ld, B, T, h, kv, d, group_stride);
}

void CudaBackend::attention_backward(ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out,
                                     const float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld,
                                     int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) {
  cuda::attention_backward(ctx_, dq, dk, dv, dout, out, lse, q, k, v, ld, B, T, h, kv, d, group_stride);
}

void CudaBackend::embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr table, int64_t m, int64_t c,
                                    int64_t v0, int64_t v_local) {
  cuda::embedding_forward(ctx_, out, tokens, table, m, c, v0, v_local);
}

void CudaBackend::embedding_backward(float* dtable, ConstActPtr dout, const int32_t* tokens, int64_t m, int64_t c,
                                     int64_t v0, int64_t v_local) {
  cuda::embedding_backward(ctx_, dtable, dout, tokens, m, c, v0, v_local);
}

void CudaBackend::position_forward(ActPtr out, const float* wpe, int64_t B, int64_t T, int64_t c) {
  cuda::position_forward(ctx_, out, wpe, B, T, c);
}

void CudaBackend::position_backward(float* dwpe, ConstActPtr dout, int64_t B, int64_t T, int64_t c) {
  cuda::position_backward(ctx_, dwpe, dout, B, T, c);
}

void CudaBackend::cross_entropy_row_max(float* row_max, ConstActPtr logits, int64_t m, int64_t v_local) {
  cuda::cross_entropy_row_max(ctx_, row_max, logits, m, v_local);
}

void CudaBackend::cross_entropy_partials(float* partials, float* max, ActPtr exps, const float* gathered_max,
                                         int64_t groups, ConstActPtr logits, const int32_t* targets, int64_t m,
                                         int64_t v_local, int64_t v0) {
  cuda::cross_entropy_partials(ctx_, partials, max, exps, gathered_max, groups, logits, targets, m, v_local, v0);
}

void CudaBackend::cross_entropy_loss(float* loss, const float* partials, const float* max, int64_t m) {
  cuda::cross_entropy_loss(ctx_, loss, partials, max, m);
}

void CudaBackend::cross_entropy_backward(ActPtr dlogits, ConstActPtr exps, const float* partials,
                                         const int32_t* targets, int64_t m, int64_t v_local, int64_t v0, float scale) {
  cuda::cross_entropy_backward(ctx_, dlogits, exps, partials, targets, m, v_local, v0, scale);
}

// One kernel that needs neither scratch buffer.
void CudaBackend::cross_entropy_rows(float* loss, ActPtr logits, const int32_t* targets, int64_t m, int64_t V,
                                     float scale, float* /*max*/, float* /*partials*/) {
  cuda::cross_entropy_rows(ctx_, loss, logits, targets, m, V, scale);
}

void CudaBackend::router_logits(float* logits, ConstActPtr x, const float* w, int64_t m, int64_t c, int64_t E) {
  cuda::router_logits(ctx_, logits, x, w, m, c, E);
}

void CudaBackend::router_backward(ActPtr dx, float* dw, const float* dlogits, ConstActPtr x, const float* w, int64_t m,
                                  int64_t c, int64_t E) {
  cuda::router_backward(ctx_, dx, dw, dlogits, x, w, m, c, E);
}

void CudaBackend::router_top_k(float* probs, int32_t* experts, float* gates, const float* logits, int64_t m, int64_t E,
                               int64_t k) {
  cuda::router_top_k(ctx_, probs, experts, gates, logits, m, E, k);
}

void CudaBackend::router_logits_grad(float* dlogits, const float* probs, const int32_t* experts, const float* dgates,
                                     const float* coef, int64_t m, int64_t E, int64_t k) {
  cuda::router_logits_grad(ctx_, dlogits, probs, experts, dgates, coef, m, E, k);
}

void CudaBackend::gather_rows(ActPtr out, ConstActPtr in, const int32_t* rows, const float* scale, int64_t n, int64_t m,
                              int64_t c) {
  cuda::gather_rows(ctx_, out, in, rows, scale, n, m, c);
}

void CudaBackend::combine_rows(ActPtr out, ConstActPtr in, const int32_t* slots, const float* gates, int64_t m,
                               int64_t k, int64_t n, int64_t c) {
  cuda::combine_rows(ctx_, out, in, slots, gates, m, k, n, c);
}

void CudaBackend::combine_gates_grad(float* dgates, ConstActPtr dout, ConstActPtr in, const int32_t* slots, int64_t m,
                                     int64_t k, int64_t n, int64_t c) {
  cuda::combine_gates_grad(ctx_, dgates, dout, in, slots, m, k, n, c);
}

void CudaBackend::adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
                        bool decay) {
  cuda::adamw(ctx_, param, grad, m, v, n, step, decay);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

void* cuda_stream_of(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda != nullptr ? static_cast<void*>(cuda->stream()) : nullptr;
}

}  // namespace axonn
