// The device API in a build without CUDA (AXONN_HAVE_CUDA off): there is no device, and
// every call that needs one says why, so the CLI and the tests compile and fail (or skip)
// with that message.
#include "comm/cuda_device.hpp"
#include "comm/nccl_grid.hpp"

namespace axonn {

int cuda_device_count(std::string* why_none) {
  if (why_none) *why_none = kNoCudaBackend;
  return 0;
}

int select_cuda_device(int, int) { throw CommError(std::string("no CUDA device: ") + kNoCudaBackend); }

CudaDeviceInfo cuda_device_info(int) { throw CommError(std::string("no CUDA device: ") + kNoCudaBackend); }

DeviceBytes::DeviceBytes(size_t bytes) : bytes_(bytes) {
  throw CommError(std::string("DeviceBytes: no CUDA device: ") + kNoCudaBackend);
}
DeviceBytes::~DeviceBytes() = default;
// Unreachable: no DeviceBytes can be constructed in this build.
void DeviceBytes::upload(const void*, size_t) { throw CommError(kNoCudaBackend); }
void DeviceBytes::download(void*, size_t) const { throw CommError(kNoCudaBackend); }
void DeviceBytes::fill_bytes(int) { throw CommError(kNoCudaBackend); }

NcclAxes connect_nccl_axes(Exchange&, const std::array<GroupSpec, kCommAxisCount>&, std::chrono::milliseconds,
                           const std::string&, const std::function<CollectiveRecorder(CommAxis)>&) {
  throw CommError(std::string("no CUDA device: ") + kNoCudaBackend + " on " + cuda_check_where());
}

// Unreachable: no NCCL grid can be connected in this build.
void order_nccl_axes_with(const std::array<NcclCommunicator*, kCommAxisCount>&, void*) {
  throw CommError(std::string("no CUDA device: ") + kNoCudaBackend);
}

}  // namespace axonn
