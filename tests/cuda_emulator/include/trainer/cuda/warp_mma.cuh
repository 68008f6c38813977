#pragma once
// trainer/cuda/warp_mma.cuh on the CPU: the same functions, computed from the register
// layouts that header states (the PTX ISA's). Each lane publishes its registers
// (cuda_emulator::warp_values, one warp barrier each, like a shuffle) and builds its own
// results from the other lanes'. ldmatrix also checks what the hardware requires: every
// lane's row address 16-byte aligned.
#include <array>
#include <cstdint>

#include "cuda_bf16.h"
#include "cuda_emulator.hpp"

namespace axonn::cuda {

namespace warp_mma_emulation {

inline float half_of(uint32_t pair, int high) {
  return __bfloat162float(__nv_bfloat16{static_cast<uint16_t>(high ? pair >> 16 : pair & 0xffffu)});
}
inline uint32_t pair_of(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(lo.bits) | static_cast<uint32_t>(hi.bits) << 16;
}
inline uint64_t join(uint32_t lo, uint32_t hi) { return static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi) << 32; }
inline uint32_t part(uint64_t v, int high) { return static_cast<uint32_t>(high ? v >> 32 : v); }

inline void ldmatrix(uint32_t (&r)[4], const __nv_bfloat16* row, bool transposed) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) cuda_emulator::die("ldmatrix: a row address is not 16-byte aligned");
  const auto rows = cuda_emulator::warp_values(row);
  const int lane = cuda_emulator::linear_thread() % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat16* const* m = &rows[static_cast<size_t>(8 * i)];  // matrix i's rows
    r[i] = transposed ? pair_of(m[2 * t][g], m[2 * t + 1][g]) : pair_of(m[g][2 * t], m[g][2 * t + 1]);
  }
}

}  // namespace warp_mma_emulation

inline void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  using namespace warp_mma_emulation;
  const auto a01 = cuda_emulator::warp_values(join(a[0], a[1]));  // rows g, g+8 at k < 8
  const auto a23 = cuda_emulator::warp_values(join(a[2], a[3]));  // the same at k >= 8
  const auto bs = cuda_emulator::warp_values(join(b[0], b[1]));
  // A[row][k] sits with lane 4·(row % 8) + (k % 8) / 2; B[k][n] with lane 4n + (k % 8) / 2.
  auto a_at = [&](int row, int k) {
    const uint64_t regs = (k < 8 ? a01 : a23)[4 * (row % 8) + (k % 8) / 2];
    return half_of(part(regs, row >= 8), k % 2);
  };
  auto b_at = [&](int k, int n) { return half_of(part(bs[4 * n + (k % 8) / 2], k >= 8), k % 2); };
  const int lane = cuda_emulator::linear_thread() % 32, g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), n = 2 * t + e % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, n);
    d[e] += sum;
  }
}

inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) { warp_mma_emulation::ldmatrix(r, row, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  warp_mma_emulation::ldmatrix(r, row, true);
}

inline uint32_t pack_bf16x2(float lo, float hi) {
  return warp_mma_emulation::pair_of(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi));
}

}  // namespace axonn::cuda
