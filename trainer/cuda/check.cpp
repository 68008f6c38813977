#include "trainer/cuda/check.hpp"

#include "trainer/cuda/cublaslt_library.hpp"

namespace axonn::cuda {
namespace {

// The device the failing call ran on, for the message; -1 if even that is unknown.
std::string current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "?";
  }
  return std::to_string(device);
}

[[noreturn]] void call_failed(const char* op, const char* call, const std::string& error) {
  fail(op, std::string(call) + " failed on CUDA device " + current_device() + ": " + error);
}

}  // namespace

std::string error_text(cudaError_t e) { return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")"; }

std::string error_text(cublasStatus_t s) {
  return std::string(cublasLt().GetStatusString(s)) + " (" + cublasLt().GetStatusName(s) + ")";
}

void check_call(cudaError_t e, const char* op, const char* call) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  call_failed(op, call, error_text(e));
}

void check_call(cublasStatus_t s, const char* op, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  (void)cudaGetLastError();
  call_failed(op, call, error_text(s));
}

}  // namespace axonn::cuda
