#pragma once
// WMMA (nvcuda::wmma) 16×16×16 with bf16 inputs and float accumulators. Every lane holds the
// whole 16×16 matrix: a load reads all of it (more than a real lane reads, so a load before
// the barrier that publishes the data reads unwritten memory), a store writes only the
// lane's share (row lane/2, 8 columns), as a real store spreads the tile over the lanes.
// Pointers must be 32-byte aligned and ldm a multiple of 16 bytes, as on the GPU.
#include <cstdint>

#include "cuda_bf16.h"
#include "cuda_emulator.hpp"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "only 16x16x16 is emulated");
  float element[256];  // row-major (row, column) of the fragment's matrix
};

template <class Fragment>
void fill_fragment(Fragment& f, float value) {
  for (float& e : f.element) e = value;
}

inline void check_pointer(const void* p, unsigned ldm, size_t element_bytes) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) cuda_emulator::die("wmma: pointer not 32-byte aligned");
  if (ldm * element_bytes % 16 != 0) cuda_emulator::die("wmma: ldm not a multiple of 16 bytes");
}
inline float value_of(__nv_bfloat16 b) { return __bfloat162float(b); }
inline float value_of(float f) { return f; }

template <class T>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, row_major>& f, const T* p, unsigned ldm) {
  check_pointer(p, ldm, sizeof(T));
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned k = 0; k < 16; ++k) f.element[i * 16 + k] = value_of(p[i * ldm + k]);
}
template <class T>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, row_major>& f, const T* p, unsigned ldm) {
  check_pointer(p, ldm, sizeof(T));
  for (unsigned k = 0; k < 16; ++k)
    for (unsigned n = 0; n < 16; ++n) f.element[k * 16 + n] = value_of(p[k * ldm + n]);
}
template <class T>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, col_major>& f, const T* p, unsigned ldm) {
  check_pointer(p, ldm, sizeof(T));
  for (unsigned k = 0; k < 16; ++k)
    for (unsigned n = 0; n < 16; ++n) f.element[k * 16 + n] = value_of(p[k + n * ldm]);
}

template <class A, class B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 16; ++n) {
      float s = c.element[i * 16 + n];
      for (int k = 0; k < 16; ++k) s += a.element[i * 16 + k] * b.element[k * 16 + n];
      out[i * 16 + n] = s;
    }
  std::memcpy(d.element, out, sizeof out);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
  check_pointer(p, ldm, sizeof(float));
  if (layout != mem_row_major) cuda_emulator::die("wmma: only row-major stores are emulated");
  const int lane = cuda_emulator::linear_thread() % 32, row = lane / 2, column0 = lane % 2 * 8;
  for (int n = column0; n < column0 + 8; ++n) p[row * static_cast<int>(ldm) + n] = f.element[row * 16 + n];
}

}  // namespace nvcuda::wmma
