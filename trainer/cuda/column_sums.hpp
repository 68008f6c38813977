#pragma once
// Column sums over many rows without atomics, so the result is the same bits on every run:
// pass 1 sums each chunk of kColumnChunkRows rows per column (a block of 32 columns × 8 row
// lanes, the lanes added in order); pass 2 adds the chunks of each column in chunk order.
// Used by bias_backward (Σ_rows dout) and, with its own pass 1, by LayerNorm's dgamma/dbeta.
#include <cstdint>

#include "trainer/activation_ptr.hpp"
#include "trainer/cuda/context.hpp"

namespace axonn::cuda {

constexpr int64_t kColumnChunkRows = 256;
constexpr int kColumnTile = 32;  // columns per block: one warp reads 128 contiguous bytes
constexpr int kRowLanes = 8;     // rows per block step: blockDim (32, 8)

inline int64_t column_chunks(int64_t m) { return (m + kColumnChunkRows - 1) / kColumnChunkRows; }

// The pass-1 grid for m rows and n columns: x = chunks, y = 32-column tiles (checked).
dim3 column_chunk_grid(const char* op, int64_t m, int64_t n);

// partials (chunks, n) = Σ over each chunk's rows of x (m, n) with row stride ld; x of either
// storage type (act_storage.cuh), the sums in float32.
void column_chunk_sums(const Context& ctx, const char* op, float* partials, ConstActPtr x, int64_t m, int64_t n,
                       int64_t ld);

// out (n) += Σ_chunk partials (chunks, n), each column over the chunks in order.
void add_column_partials(const Context& ctx, const char* op, float* out, const float* partials, int64_t chunks,
                         int64_t n);

}  // namespace axonn::cuda
