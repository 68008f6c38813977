#include "comm/cuda_check.hpp"

namespace axonn {

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
}

std::string cuda_error_text(ncclResult_t r) {
  static constexpr const char* kNames[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                           "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                           "ncclRemoteError",   "ncclInProgress"};
  const auto index = static_cast<size_t>(r);
  std::string text = std::string(ncclGetErrorString(r)) + " (" +
                     (index < std::size(kNames) ? std::string(kNames[index]) : "ncclResult " + std::to_string(index)) +
                     ")";
  // NCCL's last error says what went wrong (which peer, which socket); it may describe an
  // earlier asynchronous failure, hence "last".
  if (const char* last = ncclGetLastError(nullptr); last && *last) text += ": last NCCL error: " + std::string(last);
  return text;
}

void cuda_check_failed(const char* call, const char* file, int line, const std::string& error) {
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + " on " + cuda_check_where() +
                  ": " + error);
}

}  // namespace axonn
