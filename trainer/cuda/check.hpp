#pragma once
// Errors of the CUDA ops. Every failure is a BackendError naming the op; a failed CUDA or
// cuBLASLt call also names the call, the device and the library's error text:
//   "gemm: cublasLtMatmul(...) failed on CUDA device 0: an illegal memory access was
//    encountered (cudaErrorIllegalAddress)"
// Argument checks are the ones every backend shares (trainer/op_checks.hpp), so a bad size
// reads the same on both backends. Included by .cu files: C++17.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "trainer/op_checks.hpp"

namespace axonn::cuda {

using op_checks::fail;
using op_checks::require_at_most;
using op_checks::require_nonnegative;
using op_checks::require_positive;

// "an illegal memory access was encountered (cudaErrorIllegalAddress)"
std::string error_text(cudaError_t e);
// "the function failed to launch on the GPU (CUBLAS_STATUS_EXECUTION_FAILED)"
std::string error_text(cublasStatus_t s);

// Throws "<op>: <call> failed on CUDA device <d>: <error text>" unless the call succeeded.
// Clears the runtime's last-error slot first, so a later launch check does not report this
// (non-sticky) error a second time.
void check_call(cudaError_t e, const char* op, const char* call);
void check_call(cublasStatus_t s, const char* op, const char* call);

}  // namespace axonn::cuda

// AXONN_CUDA_OP_CHECK("copy_2d", cudaMemcpy2DAsync(...)): the call's text goes into the error.
#define AXONN_CUDA_OP_CHECK(op, call) ::axonn::cuda::check_call((call), (op), #call)
