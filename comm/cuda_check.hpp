#pragma once
// One check for every CUDA runtime and NCCL call (as ggml's CUDA_CHECK and nccl-tests'
// NCCLCHECK): a failed call throws CudaError saying which call failed, where
// (file:line), on which host and rank, and the library's own error text.
//
//   AXONN_CUDA_CHECK(cudaMalloc(&p, bytes));
//   AXONN_CUDA_CHECK(ncclGetUniqueId(&id));
//
// NCCL calls on a non-blocking communicator may also return ncclInProgress, which is not
// a failure; those go through NcclCommunicator's polling instead of this macro.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "comm/communicator.hpp"
#include "comm/cuda_device.hpp"  // set_cuda_check_rank, cuda_check_where

namespace axonn {

class CudaError : public CommError {
 public:
  using CommError::CommError;
};

inline bool cuda_call_ok(cudaError_t e) { return e == cudaSuccess; }
inline bool cuda_call_ok(ncclResult_t r) { return r == ncclSuccess; }
// "out of memory (cudaErrorMemoryAllocation)"
std::string cuda_error_text(cudaError_t e);
// "unhandled system error (ncclSystemError): <NCCL's last error message>"
std::string cuda_error_text(ncclResult_t r);

[[noreturn]] void cuda_check_failed(const char* call, const char* file, int line, const std::string& error);

}  // namespace axonn

#define AXONN_CUDA_CHECK(call)                                                                             \
  do {                                                                                                     \
    const auto axonn_check_result = (call);                                                                \
    if (!::axonn::cuda_call_ok(axonn_check_result))                                                        \
      ::axonn::cuda_check_failed(#call, __FILE__, __LINE__, ::axonn::cuda_error_text(axonn_check_result)); \
  } while (0)
