// The emulator's own promises (include/cuda_emulator.hpp), on kernels written as CUDA: this
// file goes through translate_cu.py like trainer/cuda/*.cu. A shared-memory read that lacks
// its barrier sees unwritten (NaN) memory, shuffles exchange lane values, launch limits fail
// the launch, and writes outside a device buffer or barriers that cannot complete stop the
// process naming the fault. The PTX tensor-core operations (trainer/cuda/warp_mma.cuh) follow
// the register layouts the PTX ISA documents.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "trainer/cuda/warp_mma.cuh"

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

// d (16 × 16, float) = a (16 × 16) · b (16 × 16), bf16 in global memory, through shared
// memory, ldmatrix and two m16n8k16 products, in the layouts of warp_mma.cuh. b is read
// as stored, a row per k (the transposed load), or from its transpose, a row per n.
constexpr int kLd = 24;  // a shared row: 16 elements + 8 of pad, 48 bytes (16-byte aligned rows)
constexpr size_t kMmaSharedBytes = 2 * 16 * kLd * sizeof(__nv_bfloat16);
__global__ void mma_kernel(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, bool b_transposed) {
  extern __shared__ __align__(16) unsigned char smem[];  // kMmaSharedBytes
  __nv_bfloat16 *as = reinterpret_cast<__nv_bfloat16*>(smem), *bs = as + 16 * kLd;
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  for (int i = lane; i < 256; i += 32) {
    as[i / 16 * kLd + i % 16] = a[i];
    bs[i / 16 * kLd + i % 16] = b_transposed ? b[i % 16 * 16 + i / 16] : b[i];
  }
  __syncwarp();
  const int matrix = lane / 8, row = lane % 8 + 8 * (matrix % 2), column = 8 * (matrix / 2);
  uint32_t fa[4], r[4], fb[2][2];
  axonn::cuda::ldmatrix_x4(fa, as + row * kLd + column);
  if (b_transposed) {  // bs holds b^T: matrices (n 0-7, k 0-7), (n 8-15, k 0-7), (n 0-7, k 8-15), ...
    axonn::cuda::ldmatrix_x4(r, bs + row * kLd + column);
    fb[0][0] = r[0], fb[0][1] = r[2], fb[1][0] = r[1], fb[1][1] = r[3];
  } else {  // bs holds b: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), ...
    axonn::cuda::ldmatrix_x4_trans(r, bs + row * kLd + column);
    fb[0][0] = r[0], fb[0][1] = r[1], fb[1][0] = r[2], fb[1][1] = r[3];
  }
  for (int n = 0; n < 2; ++n) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    axonn::cuda::mma_bf16_16x8x16(acc, fa, fb[n]);
    for (int e = 0; e < 4; ++e) d[(g + 8 * (e / 2)) * 16 + 8 * n + 2 * t + e % 2] = acc[e];
  }
}

__global__ void misaligned_ldmatrix_kernel() {
  extern __shared__ __align__(16) unsigned char smem[];  // 8 rows of 16 bf16
  const auto* tile = reinterpret_cast<const __nv_bfloat16*>(smem);
  uint32_t r[4];
  axonn::cuda::ldmatrix_x4(r, tile + 1 + threadIdx.x % 8 * 16);
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
  ASSERT_EQ(
      cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
      cudaSuccess);
  dynamic_shared_kernel<<<1, 32, bytes>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
}

// Small integers are exact in bf16 and in the float32 sums, so the product must be exact.
TEST(CudaEmulator, TensorCoreProductsFollowThePtxLayouts) {
  std::vector<__nv_bfloat16> a(256), b(256);
  std::vector<float> expected(256, 0.0f);
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2bfloat16_rn(static_cast<float>(i % 7 - 3));
    b[i] = __float2bfloat16_rn(static_cast<float>(i % 5 - 2));
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      for (int k = 0; k < 16; ++k)
        expected[r * 16 + c] += __bfloat162float(a[r * 16 + k]) * __bfloat162float(b[k * 16 + c]);
  __nv_bfloat16 *d_a = nullptr, *d_b = nullptr;
  float* d_d = nullptr;
  cudaMalloc(&d_a, 256 * sizeof(__nv_bfloat16));
  cudaMalloc(&d_b, 256 * sizeof(__nv_bfloat16));
  cudaMalloc(&d_d, 256 * sizeof(float));
  cudaMemcpyAsync(d_a, a.data(), 256 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, nullptr);
  cudaMemcpyAsync(d_b, b.data(), 256 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, nullptr);
  for (bool b_transposed : {false, true}) {
    mma_kernel<<<1, 32, kMmaSharedBytes>>>(d_d, d_a, d_b, b_transposed);
    std::vector<float> d(256);
    cudaMemcpyAsync(d.data(), d_d, 256 * sizeof(float), cudaMemcpyDeviceToHost, nullptr);
    for (int i = 0; i < 256; ++i)
      ASSERT_EQ(d[i], expected[i]) << "row " << i / 16 << ", column " << i % 16 << ", b transposed " << b_transposed;
  }
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_d);
}

TEST(CudaEmulatorDeathTest, LdmatrixRowsMustBe16ByteAligned) {
  EXPECT_DEATH(misaligned_ldmatrix_kernel<<<1, 32, 8 * 16 * sizeof(__nv_bfloat16)>>>(),
               "ldmatrix: a row address is not 16-byte aligned");
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
