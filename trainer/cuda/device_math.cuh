#pragma once
// Device-side helpers shared by the kernels: grid-stride indices and reductions over a warp
// and over a block. The reductions add in one fixed tree, never with atomics, so a result
// is the same bits on every run (reproducible training); they are not the CPU backend's
// order, so CPU and CUDA agree to rounding, not bitwise.
#include <cuda_runtime.h>

#include <cstdint>

#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// This thread's index in a 1-D grid and the grid's thread count, as int64 (no 32-bit
// overflow for buffers past 2^31 elements).
__device__ inline int64_t global_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ inline float neg_inf() { return __int_as_float(static_cast<int>(0xff800000u)); }

// Σ over the 32 lanes of a warp (all lanes active). XOR butterfly: every lane adds the same
// pairs in the same tree (a + b == b + a exactly), so every lane gets the same bits.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// max over the lanes; as the CPU's max_floats, x > best ? x : best, so NaN is never chosen.
__device__ inline float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Σ over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the same
// bits. Synchronizes the block: call it from every thread. `shared` holds 32 values and may
// be reused by the next call (the first barrier waits for this call's readers).
template <typename T>
__device__ inline T block_sum(T v, T* shared) {
  const unsigned lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const unsigned warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? shared[lane] : T(0));
}

__device__ inline float block_max(float v, float* shared) {
  const unsigned lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const unsigned warps = blockDim.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? shared[lane] : neg_inf());
}

}  // namespace axonn::cuda
