#include "comm/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include "comm/cuda_check.hpp"

namespace axonn {
namespace {

void require_fits(const char* what, size_t bytes, size_t capacity) {
  if (bytes > capacity)
    throw CommError(std::string("DeviceBytes::") + what + " of " + std::to_string(bytes) + " bytes into a buffer of " +
                    std::to_string(capacity) + " bytes");
}

}  // namespace

int cuda_device_count(std::string* why_none) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // No driver or no device: not a failure of this call, an answer (0). Clear the error
    // so a later CUDA call does not report it again.
    (void)cudaGetLastError();
    if (why_none) *why_none = "cudaGetDeviceCount: " + cuda_error_text(e);
    return 0;
  }
  if (count == 0 && why_none) *why_none = "cudaGetDeviceCount found 0 devices (check CUDA_VISIBLE_DEVICES)";
  return count;
}

int select_cuda_device(int local_rank, int local_size) {
  std::string why;
  const int count = cuda_device_count(&why);
  if (count == 0) throw CommError("no CUDA device: " + why + " on " + cuda_check_where());
  if (local_size > count)
    throw CommError(std::to_string(local_size) + " ranks on this node but only " + std::to_string(count) +
                    " CUDA device(s) (" + cuda_check_where() + "): NCCL needs one GPU per rank; start at most " +
                    std::to_string(count) + " tasks per node (srun --ntasks-per-node, axonn run -n)");
  AXONN_CUDA_CHECK(cudaSetDevice(local_rank));
  return local_rank;
}

CudaDeviceInfo cuda_device_info(int device) {
  cudaDeviceProp props{};
  AXONN_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  int clock_khz = 0;  // cudaDeviceProp::clockRate is gone in CUDA 13; the attribute stays
  AXONN_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  CudaDeviceInfo info;
  info.name = props.name;
  info.major = props.major;
  info.minor = props.minor;
  info.multiprocessors = props.multiProcessorCount;
  info.max_clock_hz = clock_khz * 1e3;
  info.memory_bytes = static_cast<double>(props.totalGlobalMem);
  return info;
}

DeviceBytes::DeviceBytes(size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) AXONN_CUDA_CHECK(cudaMalloc(&data_, bytes_));
}

DeviceBytes::~DeviceBytes() {
  if (data_) (void)cudaFree(data_);
}

// On the per-thread default stream, then waited for: the copy is complete on return, also
// from pageable host memory, and it does not wait for other streams' work.
void DeviceBytes::upload(const void* host, size_t bytes) {
  require_fits("upload", bytes, bytes_);
  if (bytes == 0) return;
  AXONN_CUDA_CHECK(cudaMemcpyAsync(data_, host, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
  AXONN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

void DeviceBytes::download(void* host, size_t bytes) const {
  require_fits("download", bytes, bytes_);
  if (bytes == 0) return;
  AXONN_CUDA_CHECK(cudaMemcpyAsync(host, data_, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  AXONN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

void DeviceBytes::fill_bytes(int value) {
  if (bytes_ == 0) return;
  AXONN_CUDA_CHECK(cudaMemsetAsync(data_, value, bytes_, cudaStreamPerThread));
  AXONN_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

}  // namespace axonn
