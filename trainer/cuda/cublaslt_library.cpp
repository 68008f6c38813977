#include "trainer/cuda/cublaslt_library.hpp"

#include <string>
#include <type_traits>

#include "trainer/backend_error.hpp"

#ifndef AXONN_CUBLASLT_LINKED
#include <dlfcn.h>
#endif

namespace axonn::cuda {
namespace {

#ifdef AXONN_CUBLASLT_LINKED

CublasLtFunctions load() {
  CublasLtFunctions f;
#define AXONN_CUBLASLT_TAKE(name) f.name = &::cublasLt##name;
  AXONN_CUBLASLT_FUNCTIONS(AXONN_CUBLASLT_TAKE)
#undef AXONN_CUBLASLT_TAKE
  return f;
}

#else

// "libcublasLt.so.13": the soname of the cuBLAS these headers belong to.
const std::string kSoname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

[[noreturn]] void load_failed(const std::string& why) {
  throw BackendError("make_cuda_backend: " + why +
                     "; install cuBLAS (the CUDA toolkit's libcublas, or PyTorch's nvidia-cublas package) and put "
                     "its lib folder on LD_LIBRARY_PATH");
}

// The library stays open for the life of the process: cuBLASLt handles may outlive any one
// backend, and its unload order against the CUDA runtime is not ours to choose.
void* open_library() {
  if (void* handle = dlopen(kSoname.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first = dlerror();
  const std::string configured = std::string(AXONN_CUDA_LIBRARY_DIR) + "/" + kSoname;
  if (void* handle = dlopen(configured.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  load_failed("cannot open cuBLASLt: " + first + "; nor " + configured + ": " + dlerror());
}

CublasLtFunctions load() {
  void* library = open_library();
  CublasLtFunctions f;
  auto find = [&](auto& slot, const char* symbol) {
    (void)dlerror();
    void* address = dlsym(library, symbol);
    if (address == nullptr) load_failed(kSoname + " has no " + symbol + " (a cuBLAS older than these headers?)");
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)> >(address);
  };
#define AXONN_CUBLASLT_FIND(name) find(f.name, "cublasLt" #name);
  AXONN_CUBLASLT_FUNCTIONS(AXONN_CUBLASLT_FIND)
#undef AXONN_CUBLASLT_FIND
  return f;
}

#endif

}  // namespace

const CublasLtFunctions& cublasLt() {
  static const CublasLtFunctions functions = load();
  return functions;
}

}  // namespace axonn::cuda
