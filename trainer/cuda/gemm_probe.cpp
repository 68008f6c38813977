#include "trainer/cuda/gemm_probe.hpp"

#include <utility>

#include "trainer/cuda/check.hpp"

namespace axonn::cuda {

GemmProbe::GemmProbe(const Context& ctx, const char* op, const GemmCall& call) : stream_(ctx.stream), probe_(call) {
  const auto round_up = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t c_bytes =
      round_up(static_cast<size_t>((call.batch - 1) * call.stride_c + (call.m - 1) * call.ldc + call.n) *
               call.c.element_bytes());
  const bool aux_written = call.epilogue == Epilogue::gelu_aux_bias;
  const bool bias_grad = call.epilogue == Epilogue::bias_grad_b;
  const size_t bytes = c_bytes * (aux_written ? 2 : 1) + (bias_grad ? round_up(static_cast<size_t>(call.n) * 4) : 0);
  if (cudaMalloc(&scratch_, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    scratch_ = nullptr;
    return;
  }
  auto* base = static_cast<unsigned char*>(scratch_);
  probe_.c = ActPtr(base, call.c.type());
  if (aux_written) probe_.aux = ActPtr(base + c_bytes, call.aux.type());
  if (bias_grad) probe_.bias_grad = reinterpret_cast<float*>(base + c_bytes * (aux_written ? 2 : 1));
  AXONN_CUDA_OP_CHECK(op, cudaMemsetAsync(scratch_, 0, bytes, stream_));
}

GemmProbe::~GemmProbe() {
  // Never throws (it may run while an exception unwinds): the stream drained first, as the
  // allocation may still be in use.
  if (scratch_ == nullptr) return;
  (void)cudaStreamSynchronize(stream_);
  (void)cudaFree(scratch_);
}

void GemmProbe::release(const char* op) {
  if (scratch_ == nullptr) return;
  AXONN_CUDA_OP_CHECK(op, cudaStreamSynchronize(stream_));  // the allocation is no longer in use
  AXONN_CUDA_OP_CHECK(op, cudaFree(std::exchange(scratch_, nullptr)));
}

StreamStopwatch::StreamStopwatch(const Context& ctx, const char* op) : stream_(ctx.stream), op_(op) {
  AXONN_CUDA_OP_CHECK(op, cudaEventCreate(&start_));
  const cudaError_t e = cudaEventCreate(&end_);
  if (e != cudaSuccess) {
    (void)cudaEventDestroy(start_);
    AXONN_CUDA_OP_CHECK(op, e);
  }
}

StreamStopwatch::~StreamStopwatch() {
  (void)cudaEventDestroy(start_);
  (void)cudaEventDestroy(end_);
}

void StreamStopwatch::record(bool start) { AXONN_CUDA_OP_CHECK(op_, cudaEventRecord(start ? start_ : end_, stream_)); }

float StreamStopwatch::elapsed() {
  AXONN_CUDA_OP_CHECK(op_, cudaEventSynchronize(end_));
  float ms = 0.0f;
  AXONN_CUDA_OP_CHECK(op_, cudaEventElapsedTime(&ms, start_, end_));
  return ms;
}

}  // namespace axonn::cuda
