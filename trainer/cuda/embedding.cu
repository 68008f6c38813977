#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/device_math.cuh"
#include "trainer/cuda/embedding.hpp"

namespace axonn::cuda {
namespace {
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* table, int64_t m, int64_t c,
                                         int64_t v0, int64_t v_local) {
  const int64_t total = m * c;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t i = idx / c, j = idx - i * c;
    const int64_t r = static_cast<int64_t>(tokens[i]) - v0;
    store(out + idx, (r >= 0 && r < v_local) ? load(table + r * c + j) : 0.0f);
  }
}

// keys[i] = the local table row of token i, v_local for a token outside this rank's rows
// (sorted after every real row, then skipped); positions[i] = i.
__global__ void sort_keys_kernel(uint32_t* keys, int32_t* positions, const int32_t* tokens, int64_t m, int64_t v0,
                                 int64_t v_local) {
  for (int64_t i = global_thread(); i < m; i += grid_threads()) {
    const int64_t r = static_cast<int64_t>(tokens[i]) - v0;
    keys[i] = static_cast<uint32_t>((r >= 0 && r < v_local) ? r : v_local);
    positions[i] = static_cast<int32_t>(i);
  }
}

constexpr int kSegmentUnroll = 8;  // sorted entries read per step, so their loads overlap

// Block (s, column tile): if sorted entry s starts a run of equal keys (a table row hit by
// several tokens, their positions ascending: the sort is stable), its threads add the run's
// dout rows into that table row, one column each, in token order. Blocks whose entry is not
// the start of a run, or is out of range, return at once.
template <typename T>
__global__ void segment_add_kernel(float* dtable, const T* dout, const uint32_t* keys, const int32_t* positions,
                                   int64_t m, int64_t c, int64_t v_local) {
  const int64_t s = blockIdx.x;
  const uint32_t key = keys[s];
  if (key >= v_local || (s > 0 && keys[s - 1] == key)) return;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float* d = dtable + static_cast<int64_t>(key) * c + j;
  float acc = *d;
  for (int64_t t = s; t < m; t += kSegmentUnroll) {
    bool same[kSegmentUnroll];
    float g[kSegmentUnroll];
#pragma unroll
    for (int u = 0; u < kSegmentUnroll; ++u) {
      same[u] = t + u < m && keys[t + u] == key;
      g[u] = same[u] ? load(dout + static_cast<int64_t>(positions[t + u]) * c + j) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kSegmentUnroll; ++u)
      if (same[u]) acc += g[u];
    if (!same[kSegmentUnroll - 1]) break;  // the run ended inside this step (keys are sorted)
  }
  *d = acc;
}

template <typename T>
__global__ void position_forward_kernel(T* out, const float* wpe, int64_t total, int64_t Tc) {
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads())
    store(out + idx, load(out + idx) + wpe[idx % Tc]);
}

template <typename T>
__global__ void position_backward_kernel(float* dwpe, const T* dout, int64_t B, int64_t Tc) {
  for (int64_t idx = global_thread(); idx < Tc; idx += grid_threads()) {
    float acc = dwpe[idx];
    for (int64_t b = 0; b < B; ++b) acc += load(dout + b * Tc + idx);
    dwpe[idx] = acc;
  }
}

// Bits of the largest key (v_local, the out-of-range marker): the radix sort looks at no more.
int key_bits(int64_t v_local) {
  int bits = 1;
  while ((int64_t{1} << bits) <= v_local) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(const Context& ctx, ActPtr out, const int32_t* tokens, ConstActPtr table, int64_t m, int64_t c,
                       int64_t v0, int64_t v_local) {
  op_checks::require_embedding_sizes("embedding_forward", m, c, v_local);
  if (m == 0 || c == 0) return;
  with_storage(common_type("embedding_forward", {out, table}), [&](auto t) {
    using T = decltype(t);
    embedding_forward_kernel<T>
        <<<grid_for(m * c), kThreads, 0, ctx.stream>>>(typed<T>(out), tokens, typed<T>(table), m, c, v0, v_local);
  });
  check_launch(ctx, "embedding_forward");
}

void embedding_backward(const Context& ctx, float* dtable, ConstActPtr dout, const int32_t* tokens, int64_t m,
                        int64_t c, int64_t v0, int64_t v_local) {
  const char* op = "embedding_backward";
  op_checks::require_embedding_sizes(op, m, c, v_local);
  if (m == 0 || c == 0 || v_local == 0) return;
  // Positions and keys are 32-bit in the sort.
  require_at_most(op, "m", m, "the sort's limit", std::numeric_limits<int32_t>::max());
  require_at_most(op, "v_local", v_local, "the sort's limit", std::numeric_limits<int32_t>::max() - 1);
  const int n = static_cast<int>(m);
  const int bits = key_bits(v_local);

  size_t sort_bytes = 0;  // cub's temporary storage for n items (a size query: no device work)
  AXONN_CUDA_OP_CHECK(
      op, cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr),
                                          static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                          static_cast<int32_t*>(nullptr), n, 0, bits, ctx.stream));
  ScratchLayout layout;
  const size_t items = static_cast<size_t>(m);
  const size_t keys_in_at = layout.add(items * sizeof(uint32_t));
  const size_t keys_out_at = layout.add(items * sizeof(uint32_t));
  const size_t pos_in_at = layout.add(items * sizeof(int32_t));
  const size_t pos_out_at = layout.add(items * sizeof(int32_t));
  const size_t temp_at = layout.add(sort_bytes);
  auto* base = static_cast<char*>(ctx.scratch->get(ctx.stream, layout.total(), op));
  auto* keys_in = reinterpret_cast<uint32_t*>(base + keys_in_at);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + keys_out_at);
  auto* pos_in = reinterpret_cast<int32_t*>(base + pos_in_at);
  auto* pos_out = reinterpret_cast<int32_t*>(base + pos_out_at);

  sort_keys_kernel<<<grid_for(m), kThreads, 0, ctx.stream>>>(keys_in, pos_in, tokens, m, v0, v_local);
  check_launch(ctx, op);
  AXONN_CUDA_OP_CHECK(op, cub::DeviceRadixSort::SortPairs(base + temp_at, sort_bytes, keys_in, keys_out, pos_in,
                                                          pos_out, n, 0, bits, ctx.stream));
  const dim3 grid(grid_dim(op, "tokens", m, true), grid_dim(op, "column tiles", (c + kThreads - 1) / kThreads, false));
  with_storage(dout.type(), [&](auto t) {
    using T = decltype(t);
    segment_add_kernel<T><<<grid, kThreads, 0, ctx.stream>>>(dtable, typed<T>(dout), keys_out, pos_out, m, c, v_local);
  });
  check_launch(ctx, op);
}

void position_forward(const Context& ctx, ActPtr out, const float* wpe, int64_t B, int64_t T, int64_t c) {
  require_nonnegative("position_forward", "B", B);
  require_nonnegative("position_forward", "T", T);
  require_nonnegative("position_forward", "c", c);
  const int64_t total = B * T * c;
  if (total == 0) return;
  with_storage(out.type(), [&](auto t) {
    using S = decltype(t);
    position_forward_kernel<S><<<grid_for(total), kThreads, 0, ctx.stream>>>(typed<S>(out), wpe, total, T * c);
  });
  check_launch(ctx, "position_forward");
}

void position_backward(const Context& ctx, float* dwpe, ConstActPtr dout, int64_t B, int64_t T, int64_t c) {
  require_nonnegative("position_backward", "B", B);
  require_nonnegative("position_backward", "T", T);
  require_nonnegative("position_backward", "c", c);
  if (B == 0 || T * c == 0) return;
  with_storage(dout.type(), [&](auto t) {
    using S = decltype(t);
    position_backward_kernel<S><<<grid_for(T * c), kThreads, 0, ctx.stream>>>(dwpe, typed<S>(dout), B, T * c);
  });
  check_launch(ctx, "position_backward");
}

}  // namespace axonn::cuda
