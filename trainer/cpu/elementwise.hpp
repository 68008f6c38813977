#pragma once
// Elementwise ops on flat buffers of n floats (residual add, scale, axpy, fill) and a
// strided 2-D copy.
#include <cstdint>

#include "trainer/cpu/thread_pool.hpp"

namespace axonn::cpu {

void add(ThreadPool& pool, float* out, const float* a, const float* b, int64_t n);  // out = a + b (may alias a, b)
void scale(ThreadPool& pool, float* x, float alpha, int64_t n);                     // x *= alpha
void axpy(ThreadPool& pool, float* y, float alpha, const float* x, int64_t n);      // y += alpha·x
void fill(ThreadPool& pool, float* x, float value, int64_t n);                      // x = value
void zero_bytes(ThreadPool& pool, void* ptr, size_t bytes);                         // memset 0
// dst (rows, cols), row stride ld_dst = src (rows, cols), row stride ld_src
void copy_2d(ThreadPool& pool, float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
             int64_t cols);

}  // namespace axonn::cpu
