#pragma once
// cuBLASLt, opened when the first CUDA backend is made instead of when the process starts.
// libcublasLt's load-time constructors take ~0.5 s of CPU and ~200 MB of resident memory
// (perf and /usr/bin/time on `axonn --version`: 0.6 s and 229 MB linked, 0.05 s and 19 MB
// without it), which every axonn process paid while the executable linked the library: the
// launcher, every CPU rank, every CLI call. Now only a process that uses a GPU pays it.
//
// Calls read as the library's: cublasLt().Matmul(...) is cublasLtMatmul(...). The library is
// found as the dynamic loader finds any (LD_LIBRARY_PATH, the executable's run path, the
// system's), then in the CUDA toolkit's library folder this build was configured with. The
// CUDA emulator (tests/cuda_emulator) compiles this file with AXONN_CUBLASLT_LINKED, and the
// table then holds its functions.
#include <cublasLt.h>

namespace axonn::cuda {

// X(Name) for each cuBLASLt function the backend calls, cublasLt<Name>.
// clang-format off
#define AXONN_CUBLASLT_FUNCTIONS(X) \
  X(Create) \
  X(Destroy) \
  X(GetStatusName) \
  X(GetStatusString) \
  X(Matmul) \
  X(MatmulAlgoGetHeuristic) \
  X(MatmulDescCreate) \
  X(MatmulDescDestroy) \
  X(MatmulDescSetAttribute) \
  X(MatmulPreferenceCreate) \
  X(MatmulPreferenceDestroy) \
  X(MatmulPreferenceSetAttribute) \
  X(MatrixLayoutCreate) \
  X(MatrixLayoutDestroy) \
  X(MatrixLayoutSetAttribute)
// clang-format on

// One pointer per function, named without the cublasLt prefix.
struct CublasLtFunctions {
#define AXONN_CUBLASLT_MEMBER(name) decltype(&::cublasLt##name) name = nullptr;
  AXONN_CUBLASLT_FUNCTIONS(AXONN_CUBLASLT_MEMBER)
#undef AXONN_CUBLASLT_MEMBER
};

// The functions, loaded on the first call (thread-safe; later calls return the same table).
// Throws BackendError naming the library it could not open, or the function it did not find
// in it, and what to install or set.
const CublasLtFunctions& cublasLt();

}  // namespace axonn::cuda
