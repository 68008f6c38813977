// The CUDA backend where there is no GPU (label unit: CI machines): asking for it fails with
// a BackendError that names the op, the device and why (the CUDA runtime's error, or a build
// without CUDA), and no other backend has a CUDA stream. With a GPU, test_cuda_backend (label
// gpu) covers the backend and the first test here skips. Where CUDA is installed, cuBLASLt
// is opened by the first backend, not at process start, and answers without a GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/cuda/cuda_backend.hpp"
#if AXONN_HAVE_CUDA
#include "trainer/cuda/cublaslt_library.hpp"
#endif

namespace axonn {
namespace {

TEST(CudaBackendErrors, WithoutADeviceMakeCudaBackendSaysWhy) {
  std::string why;
  if (cuda_device_count(&why) > 0) GTEST_SKIP() << "this machine has a CUDA device: test_cuda_backend covers it";
  EXPECT_FALSE(why.empty());
  try {
    make_cuda_backend(CudaBackendOptions{});
    ADD_FAILURE() << "make_cuda_backend succeeded without a CUDA device";
  } catch (const BackendError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("make_cuda_backend: CUDA device 0"), std::string::npos) << what;
#if AXONN_HAVE_CUDA
    // The runtime's answer: no driver, no device, or none visible.
    EXPECT_TRUE(what.find("cudaGetDeviceCount failed: ") != std::string::npos ||
                what.find("does not exist: this process sees 0 device(s)") != std::string::npos)
        << what;
#else
    EXPECT_NE(what.find("this build has no CUDA backend"), std::string::npos) << what;
    EXPECT_NE(what.find("-DAXONN_CUDA=ON"), std::string::npos) << what;
#endif
  }
}

TEST(CudaBackendErrors, OtherBackendsHaveNoCudaStream) {
  auto cpu = make_cpu_backend(1);
  EXPECT_EQ(cuda_stream_of(*cpu), nullptr);
}

#if AXONN_HAVE_CUDA
// True when this process has mapped a file whose name holds `library`.
bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(library) != std::string::npos;
}

TEST(CudaBackendErrors, CublasLtIsOpenedOnFirstUseNotAtStart) {
  // This binary links the CUDA backend as axonn does: a CPU job or CLI call never opens it.
  EXPECT_FALSE(mapped("libcublasLt")) << "libcublasLt was loaded at process start; it should be linked by no target";
  const cuda::CublasLtFunctions& lt = cuda::cublasLt();
  EXPECT_TRUE(mapped("libcublasLt"));
  EXPECT_EQ(&lt, &cuda::cublasLt());
  // Every function was found (a null one would have thrown), and one answers without a GPU.
  EXPECT_NE(lt.MatrixLayoutSetAttribute, nullptr);
  EXPECT_STREQ(lt.GetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
}
#endif

}  // namespace
}  // namespace axonn
