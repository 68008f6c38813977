#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/column_sums.hpp"
#include "trainer/cuda/device_math.cuh"

namespace axonn::cuda {
namespace {

// Block (32, 8): column blockIdx.y·32 + threadIdx.x, rows chunk·R + threadIdx.y + 8·s.
template <typename T>
__global__ void column_chunk_sums_kernel(float* partials, const T* x, int64_t m, int64_t n, int64_t ld) {
  __shared__ float lanes[kRowLanes][kColumnTile + 1];
  const int64_t chunk = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kColumnTile + threadIdx.x;
  const int64_t r0 = chunk * kColumnChunkRows;
  const int64_t r1 = r0 + kColumnChunkRows < m ? r0 + kColumnChunkRows : m;
  float s = 0.0f;
  if (j < n)
    for (int64_t i = r0 + threadIdx.y; i < r1; i += kRowLanes) s += load(x + i * ld + j);
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    float total = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) total += lanes[y][threadIdx.x];
    partials[chunk * n + j] = total;
  }
}

__global__ void add_column_partials_kernel(float* out, const float* partials, int64_t chunks, int64_t n) {
  for (int64_t j = global_thread(); j < n; j += grid_threads()) {
    float total = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * n + j];
    out[j] += total;
  }
}

}  // namespace

dim3 column_chunk_grid(const char* op, int64_t m, int64_t n) {
  return dim3(grid_dim(op, "row chunks", column_chunks(m), true),
              grid_dim(op, "32-column tiles", (n + kColumnTile - 1) / kColumnTile, false));
}

void column_chunk_sums(const Context& ctx, const char* op, float* partials, ConstActPtr x, int64_t m, int64_t n,
                       int64_t ld) {
  if (m == 0 || n == 0) return;
  with_storage(x.type(), [&](auto t) {
    using T = decltype(t);
    column_chunk_sums_kernel<T>
        <<<column_chunk_grid(op, m, n), dim3(kColumnTile, kRowLanes), 0, ctx.stream>>>(partials, typed<T>(x), m, n, ld);
  });
  check_launch(ctx, op);
}

void add_column_partials(const Context& ctx, const char* op, float* out, const float* partials, int64_t chunks,
                         int64_t n) {
  if (chunks == 0 || n == 0) return;
  add_column_partials_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(out, partials, chunks, n);
  check_launch(ctx, op);
}

}  // namespace axonn::cuda
