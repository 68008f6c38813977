#pragma once
// Elementwise ops on flat buffers of n floats (residual add, scale, axpy, fill) and a
// strided 2-D copy.
#include <cstdint>

namespace axonn::cpu {

void add(float* out, const float* a, const float* b, int64_t n);  // out = a + b (may alias a or b)
void scale(float* x, float alpha, int64_t n);                     // x *= alpha
void axpy(float* y, float alpha, const float* x, int64_t n);      // y += alpha·x
void fill(float* x, float value, int64_t n);                      // x = value
// dst (rows, cols), row stride ld_dst = src (rows, cols), row stride ld_src
void copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols);

}  // namespace axonn::cpu
