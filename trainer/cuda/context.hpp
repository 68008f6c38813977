#pragma once
// What every CUDA op needs besides its arguments: the compute stream it is ordered on, the
// backend's scratch memory, and the launch geometry and checks shared by the kernels.
// Included by .cu files: C++17.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace axonn::cuda {

class Gemm;

// Device memory an op needs during one call (partial sums, attention's row terms D, the
// embedding sort), reused by the next call: ops on one stream run one after another, so one
// region is enough. It grows to the largest request and never shrinks, so once every op has
// run once, steady-state steps allocate nothing.
class Scratch {
 public:
  Scratch() = default;
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // At least `bytes` bytes, 256-byte aligned, valid until the next get(). Growing waits for
  // `stream` first (queued work may still use the old region).
  void* get(cudaStream_t stream, size_t bytes, const char* op);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Hands out consecutive 256-byte aligned pieces of one scratch request: first sum the sizes
// with add(), then get() the region and take() the pieces in the same order.
class ScratchLayout {
 public:
  size_t add(size_t bytes) {  // returns the piece's offset
    const size_t offset = total_;
    total_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

struct Context {
  cudaStream_t stream = nullptr;
  Scratch* scratch = nullptr;
  Gemm* gemm = nullptr;       // the gemm op's cuBLASLt engine (the backend's GemmMath)
  bool sync_each_op = false;  // AXONN_CUDA_SYNC_OPS=1: wait after every kernel (see check_launch)
};

constexpr int kThreads = 256;  // threads per block of the elementwise and row kernels
constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;
constexpr int64_t kMaxBlocks = 16384;  // grid-stride loops cover the rest; ~15 waves on an H100

// Blocks for a grid-stride loop over n elements (n > 0).
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// A grid dimension for `count` independent units (rows, chunks): throws naming the op when
// count exceeds what one launch can index (2^31 − 1 in x, 65535 in y and z).
unsigned grid_dim(const char* op, const char* what, int64_t count, bool x_axis);

// After each kernel launch: a bad launch (configuration, missing kernel image for this GPU)
// throws naming the op. With sync_each_op it also waits for the kernel, so an asynchronous
// fault (illegal address) names the op that caused it instead of a later call.
void check_launch(const Context& ctx, const char* op);

}  // namespace axonn::cuda
