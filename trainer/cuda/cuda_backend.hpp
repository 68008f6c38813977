#pragma once
// The CUDA backend: every op of trainer/backend.hpp on device memory of one GPU, ordered on
// one stream of that device (the compute stream). The model, optimizer and checkpoint code
// are the same as on the CPU backend; the GEMMs run on tensor cores (GemmMath), which is
// where a GPT step spends its FLOPs. Activations are float32 like the CPU's, or bf16
// (options.activations: mixed precision's storage, llm.c's layout), which every op reads
// and writes with float32 math (act_storage.cuh); parameters, their gradients, the AdamW
// moments and statistics stay float32.
//
// In a build without CUDA (AXONN_CUDA=OFF, or no nvcc/NCCL found) make_cuda_backend throws a
// BackendError saying how to build with it; nothing else here needs CUDA headers.
#include <memory>
#include <string>

#include "comm/cuda_device.hpp"  // cuda_device_count, select_cuda_device
#include "trainer/backend.hpp"

namespace axonn {

// How the GEMMs multiply float32 buffers (cuBLASLt compute types):
// - bf16: inputs rounded to bfloat16, float32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF):
//   the mixed-precision training default, at the bf16 tensor-core rate; attention's products
//   run on bf16 tensor cores too (attention_bf16.hpp);
// - tf32: inputs rounded to TF32 (10-bit mantissa), float32 accumulation;
// - fp32: exact float32 (no tensor cores), for checks against the CPU backend.
// With tf32 and fp32 attention is exact float32 (attention.hpp).
enum class GemmMath { bf16, tf32, fp32 };

// "bf16", "tf32", "fp32", for logs and errors.
inline const char* gemm_math_name(GemmMath math) {
  switch (math) {
    case GemmMath::bf16:
      return "bf16";
    case GemmMath::tf32:
      return "tf32";
    case GemmMath::fp32:
      break;
  }
  return "fp32";
}

struct CudaBackendOptions {
  int device = 0;  // the CUDA device this rank uses (its local rank, modulo the devices seen)
  GemmMath gemm_math = GemmMath::bf16;
  // activation_type(): bfloat16 halves the activations' memory and bytes moved, and the
  // GEMMs then read bf16 operands (a bf16 copy of the weights) whatever gemm_math says.
  ElementType activations = ElementType::float32;
  // How many of cuBLASLt's heuristic algorithms each new GEMM shape times on its first call,
  // keeping the fastest, and whether each epilogue runs fused or as kernels, likewise (1 to
  // 16; 1: the heuristic's first, untimed, fused wherever it can). Over 1 a rerun may pick
  // another algorithm, so its results may differ in the last bits; so may two ranks, whose
  // replicas of a parameter must keep the same bits: one rank only (the benchmarks), until
  // the ranks agree on their choices.
  int gemm_candidates = 1;
};

// The backend on options.device; BackendError naming the device and the CUDA error when the
// device cannot be used, or, in a build without CUDA, naming the build option. Makes the
// device current for the calling thread (cudaSetDevice), which then issues every op.
// With AXONN_CUDA_SYNC_OPS=1 in the environment the backend waits for every op as it is
// issued, so an asynchronous fault (illegal address) names the op that caused it (slow: for
// debugging).
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

// The CUDA backend's compute stream (a cudaStream_t, as void* so that callers need no CUDA
// header), nullptr for any other backend. Every op of that backend is ordered on it; work
// on another stream (NCCL) that reads an op's output must wait for an event recorded on it,
// and the compute stream must wait for that work before an op overwrites its buffers.
void* cuda_stream_of(Backend& backend);

}  // namespace axonn
