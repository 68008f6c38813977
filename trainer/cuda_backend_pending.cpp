// Until the CUDA backend (trainer/cuda/) is merged: the two functions of its interface that
// `axonn train` calls, so that it links. make_cuda_backend refuses with a BackendError, so a
// run that chooses the GPU stops at once, saying so. cuda_device_count, which
// trainer/cuda/cuda_backend.hpp also declares, is axonn_comm's (comm/cuda_device.cpp, or
// no_cuda.cpp without CUDA) and is not defined again here.
#include <string>

#include "trainer/cuda/cuda_backend.hpp"

namespace axonn {

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  throw BackendError("CUDA backend not built yet: make_cuda_backend(device " + std::to_string(options.device) +
                     ") has no implementation in this build (trainer/cuda/ is not merged); set "
                     "training.device = \"cpu\"");
}

void* cuda_stream_of(Backend&) { return nullptr; }

}  // namespace axonn
