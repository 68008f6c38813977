// The CUDA backend in a build without CUDA (AXONN_HAVE_CUDA off): make_cuda_backend says how
// to build with it; cuda_stream_of has no CUDA backend to find. (cuda_device_count, 0 with
// the reason here, is axonn_comm's: see cuda_backend.hpp.)
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn {

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  throw BackendError("make_cuda_backend: CUDA device " + std::to_string(options.device) +
                     ": this build has no CUDA backend: nvcc, the CUDA runtime or NCCL was not found at configure "
                     "time; configure with nvcc and NCCL under /usr/local/cuda, or -DAXONN_CUDA=ON to require it");
}

void* cuda_stream_of(Backend&) { return nullptr; }

}  // namespace axonn
