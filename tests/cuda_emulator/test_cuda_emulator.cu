// The emulator's own promises (include/cuda_emulator.hpp), on kernels written as CUDA: this
// file goes through translate_cu.py like trainer/cuda/*.cu. A shared-memory read that lacks
// its barrier sees unwritten (NaN) memory, shuffles exchange lane values, launch limits fail
// the launch, and writes outside a device buffer or barriers that cannot complete stop the
// process naming the fault.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

constexpr int kThreads = 64;

// out[t] = in[kThreads − 1 − t] through shared memory, with or without the barrier between
// the writes and the reads.
__global__ void reverse_kernel(float* out, const float* in, bool barrier) {
  __shared__ float tile[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  tile[t] = in[t];
  if (barrier) __syncthreads();
  out[t] = tile[kThreads - 1 - t];
}

// out[lane] = Σ over the warp of (lane + 1), by an XOR butterfly of shuffles.
__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x + 1);
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

__global__ void dynamic_shared_kernel(float* out) {
  extern __shared__ float big[];
  big[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = big[0];
}

__global__ void write_past_end_kernel(float* out, int n) { out[n] = 1.0f; }

// Thread 0 waits at the warp's barrier, the others at the block's: neither completes.
__global__ void crossed_barriers_kernel() {
  if (threadIdx.x == 0)
    __syncwarp();
  else
    __syncthreads();
}

std::vector<float> run_reverse(bool barrier) {
  std::vector<float> in(kThreads), out(kThreads);
  for (int i = 0; i < kThreads; ++i) in[i] = static_cast<float>(i);
  float *d_in = nullptr, *d_out = nullptr;
  cudaMalloc(&d_in, kThreads * sizeof(float));
  cudaMalloc(&d_out, kThreads * sizeof(float));
  cudaMemcpyAsync(d_in, in.data(), kThreads * sizeof(float), cudaMemcpyHostToDevice, nullptr);
  reverse_kernel<<<1, kThreads>>>(d_out, d_in, barrier);
  cudaMemcpyAsync(out.data(), d_out, kThreads * sizeof(float), cudaMemcpyDeviceToHost, nullptr);
  cudaFree(d_in);
  cudaFree(d_out);
  return out;
}

TEST(CudaEmulator, SharedMemoryReadBeforeItsBarrierSeesNaN) {
  const std::vector<float> with = run_reverse(true), without = run_reverse(false);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(with[t], static_cast<float>(kThreads - 1 - t));
  EXPECT_TRUE(std::isnan(without[0])) << "thread 0 ran to the end before thread 63 wrote its element";
}

TEST(CudaEmulator, ShufflesExchangeLaneValues) {
  float* d = nullptr;
  cudaMalloc(&d, 32 * sizeof(float));
  warp_sum_kernel<<<1, 32>>>(d);
  std::vector<float> out(32);
  cudaMemcpyAsync(out.data(), d, 32 * sizeof(float), cudaMemcpyDeviceToHost, nullptr);
  cudaFree(d);
  for (float v : out) EXPECT_EQ(v, 528.0f);  // 1 + 2 + ... + 32
}

TEST(CudaEmulator, DynamicSharedMemoryOver48KiBNeedsTheAttribute) {
  float* d = nullptr;
  cudaMalloc(&d, 32 * sizeof(float));
  const size_t bytes = 64 * 1024;
  dynamic_shared_kernel<<<1, 32, bytes>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(bytes)),
            cudaSuccess);
  dynamic_shared_kernel<<<1, 32, bytes>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
}

TEST(CudaEmulatorDeathTest, AWriteOutsideADeviceBufferStopsAtItsFree) {
  EXPECT_DEATH(
      {
        float* d = nullptr;
        cudaMalloc(&d, 10 * sizeof(float));
        write_past_end_kernel<<<1, 1>>>(d, 10);
        cudaFree(d);
      },
      "wrote past the end of this device buffer");
}

TEST(CudaEmulatorDeathTest, BarriersThatCannotCompleteAreADeadlock) {
  EXPECT_DEATH(crossed_barriers_kernel<<<1, 32>>>(), "deadlock");
}

}  // namespace
