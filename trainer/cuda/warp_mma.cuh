#pragma once
// Warp-wide bf16 tensor-core products in PTX (mma.sync m16n8k16, ldmatrix), whose register
// layouts the PTX ISA documents ("Matrix Fragments for mma.m16n8k16 with floating point
// type"; "Warp-level matrix load instruction: ldmatrix"). Knowing the layout lets a kernel
// keep a product in registers and feed its accumulators to the next product as the A
// operand, with no trip through shared memory (what the WMMA API's opaque fragments force).
// Lane l: g = l / 4 (its group), t = l % 4. Two bf16 share a register, the lower column (or
// k) in the low half.
//   A (16 × 16, row-major): a[0] = A[g][2t, 2t+1],   a[1] = A[g+8][2t, 2t+1],
//                            a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16 × 8, k × n):       b[0] = B[2t, 2t+1][g],   b[1] = B[2t+8, 2t+9][g]
//   C, D (16 × 8, float):    d[0], d[1] = D[g][2t, 2t+1];  d[2], d[3] = D[g+8][2t, 2t+1]
// The CUDA emulator (tests/cuda_emulator/include/trainer/cuda/warp_mma.cuh) computes the same
// from these layouts on the CPU.
#include <cuda_bf16.h>

#include <cstdint>

namespace axonn::cuda {

// d += a · b, float32 accumulation.
__device__ inline void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8 × 8 bf16 matrices from shared memory: lanes 8i .. 8i+7 each point at one row of
// matrix i (16 bytes, 16-byte aligned). r[i] = this lane's pair of matrix i: row g, columns
// 2t, 2t+1 (ldmatrix_x4), or of its transpose, rows 2t, 2t+1 of column g (ldmatrix_x4_trans).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// lo and hi rounded to bf16 (nearest even) in one register, lo in the low half.
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

}  // namespace axonn::cuda
