#pragma once
// Elementwise ops on the compute stream (see Backend for the contracts).
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

void add(const Context& ctx, float* out, const float* a, const float* b, int64_t n);  // out may alias a or b
void scale(const Context& ctx, float* x, float alpha, int64_t n);
void axpy(const Context& ctx, float* y, float alpha, const float* x, int64_t n);
void fill(const Context& ctx, float* x, float value, int64_t n);
// dst (n) = src in dst's type (bf16: rounded to nearest even).
void convert(const Context& ctx, ActPtr dst, const float* src, int64_t n);
// C (m, n) with row stride ldc = beta·C; beta = 0 writes 0 without reading C. The GEMM with
// an empty inner dimension (k = 0); `op` names the caller in errors.
void scale_matrix(const Context& ctx, const char* op, ActPtr c, int64_t ldc, int64_t m, int64_t n, float beta);

}  // namespace axonn::cuda
