#include "trainer/cuda/context.hpp"

#include <string>

#include "trainer/cuda/check.hpp"

namespace axonn::cuda {

Scratch::~Scratch() {
  // Never throws: the backend's destructor has waited for its stream already.
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
}

void* Scratch::get(cudaStream_t stream, size_t bytes, const char* op) {
  if (bytes <= bytes_) return ptr_;
  AXONN_CUDA_OP_CHECK(op, cudaStreamSynchronize(stream));
  if (ptr_ != nullptr) {
    AXONN_CUDA_OP_CHECK(op, cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
  }
  // Some headroom, so a slowly growing request (a longer sequence) does not reallocate often.
  const size_t want = bytes + bytes / 4;
  const cudaError_t e = cudaMalloc(&ptr_, want);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    ptr_ = nullptr;
    fail(op, "cudaMalloc of " + std::to_string(want) + " bytes of scratch memory failed: " + error_text(e));
  }
  bytes_ = want;
  return ptr_;
}

unsigned grid_dim(const char* op, const char* what, int64_t count, bool x_axis) {
  const int64_t limit = x_axis ? 2147483647 : 65535;
  if (count > limit)
    fail(op, std::string(what) + " = " + std::to_string(count) + " exceeds the " + std::to_string(limit) +
                 " blocks one CUDA launch can index");
  return static_cast<unsigned>(count);
}

void check_launch(const Context& ctx, const char* op) {
  AXONN_CUDA_OP_CHECK(op, cudaGetLastError());
  if (ctx.sync_each_op) AXONN_CUDA_OP_CHECK(op, cudaStreamSynchronize(ctx.stream));
}

}  // namespace axonn::cuda
