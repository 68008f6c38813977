#include "trainer/cuda/act_storage.cuh"
#include "trainer/cuda/check.hpp"
#include "trainer/cuda/cross_entropy.hpp"
#include "trainer/cuda/device_math.cuh"

namespace axonn::cuda {
namespace {

// One block per row: row blockIdx.x.
template <typename T>
__global__ void row_max_kernel(float* row_max, const T* logits, int64_t v_local) {
  __shared__ float shared[kWarpSize];
  const int64_t i = blockIdx.x;
  const T* row = logits + i * v_local;
  float best = neg_inf();
  for (int64_t j = threadIdx.x; j < v_local; j += blockDim.x) {
    const float x = load(row + j);
    best = x > best ? x : best;
  }
  best = block_max(best, shared);
  if (threadIdx.x == 0) row_max[i] = best;
}

// exps may alias logits: thread 0 reads the target's logit before the barrier that precedes
// every overwrite; each other element is read and written by the same thread.
template <typename T>
__global__ void partials_kernel(float* partials, float* max, T* exps, const float* gathered_max, int64_t groups,
                                const T* logits, const int32_t* targets, int64_t m, int64_t v_local, int64_t v0) {
  __shared__ double shared[kWarpSize];
  __shared__ float target_logit;
  const int64_t i = blockIdx.x;
  float mx = gathered_max[i];
  for (int64_t g = 1; g < groups; ++g) mx = gathered_max[g * m + i] > mx ? gathered_max[g * m + i] : mx;
  const T* row = logits + i * v_local;
  if (threadIdx.x == 0) {
    const int64_t r = static_cast<int64_t>(targets[i]) - v0;
    target_logit = (r >= 0 && r < v_local) ? load(row + r) : 0.0f;
  }
  __syncthreads();
  T* e = exps + i * v_local;
  double s = 0.0;  // of the exps before they are stored (rounded to T)
  for (int64_t j = threadIdx.x; j < v_local; j += blockDim.x) {
    const float ej = expf(load(row + j) - mx);
    store(e + j, ej);
    s += static_cast<double>(ej);
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    max[i] = mx;
    partials[2 * i] = static_cast<float>(s);
    partials[2 * i + 1] = target_logit;
  }
}

__global__ void loss_kernel(float* loss, const float* partials, const float* max, int64_t m) {
  for (int64_t i = global_thread(); i < m; i += grid_threads())
    loss[i] = logf(partials[2 * i]) + max[i] - partials[2 * i + 1];
}

// Element by element (dlogits may alias exps): e·s rounded first (no fused multiply-add),
// then the target's 1·scale subtracted, as the CPU backend does.
template <typename T>
__global__ void backward_kernel(T* dlogits, const T* exps, const float* partials, const int32_t* targets, int64_t m,
                                int64_t v_local, int64_t v0, float scale) {
  const int64_t total = m * v_local;
  for (int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const int64_t i = idx / v_local, j = idx - i * v_local;
    const float s = scale / partials[2 * i];  // softmax = exps / Σ exps
    float d = __fmul_rn(load(exps + idx), s);
    if (static_cast<int64_t>(targets[i]) - v0 == j) d -= scale;
    store(dlogits + idx, d);
  }
}

// Whole rows (v0 = 0), one block per row: each thread keeps a running max and Σ exp over its
// elements (rescaling the sum when the max grows), the block combines them, thread 0 writes
// the loss; then the row is replaced by its gradient as backward_kernel computes it. Two
// reads of the row and one write, where the stages make three reads and two writes. Every
// thread reads the target's logit before the barriers inside block_max, so before any write.
template <typename T>
__global__ void rows_kernel(float* loss, T* logits, const int32_t* targets, int64_t V, float scale) {
  __shared__ float shared_max[kWarpSize];
  __shared__ double shared_sum[kWarpSize];
  const int64_t i = blockIdx.x;
  T* row = logits + i * V;
  const int64_t target = targets[i];
  const float target_logit = (target >= 0 && target < V) ? load(row + target) : 0.0f;
  float mx = neg_inf();
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float x = load(row + j);
    if (x > mx) {
      s = s * static_cast<double>(expf(mx - x)) + 1.0;
      mx = x;
    } else {
      s += static_cast<double>(expf(x - mx));
    }
  }
  const float row_max = block_max(mx, shared_max);
  const double sum = block_sum(s * static_cast<double>(expf(mx - row_max)), shared_sum);
  const auto total = static_cast<float>(sum);
  if (threadIdx.x == 0) loss[i] = logf(total) + row_max - target_logit;
  const float inv = scale / total;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float d = __fmul_rn(expf(load(row + j) - row_max), inv);
    if (j == target) d -= scale;
    store(row + j, d);
  }
}

}  // namespace

void cross_entropy_rows(const Context& ctx, float* loss, ActPtr logits, const int32_t* targets, int64_t m, int64_t V,
                        float scale) {
  const char* op = "cross_entropy_rows";
  require_nonnegative(op, "m", m);
  require_positive(op, "V", V);
  if (m == 0) return;
  with_storage(logits.type(), [&](auto t) {
    using T = decltype(t);
    rows_kernel<T>
        <<<grid_dim(op, "rows", m, true), kThreads, 0, ctx.stream>>>(loss, typed<T>(logits), targets, V, scale);
  });
  check_launch(ctx, op);
}

void cross_entropy_row_max(const Context& ctx, float* row_max, ConstActPtr logits, int64_t m, int64_t v_local) {
  const char* op = "cross_entropy_row_max";
  require_nonnegative(op, "m", m);
  require_positive(op, "v_local", v_local);
  if (m == 0) return;
  with_storage(logits.type(), [&](auto t) {
    using T = decltype(t);
    row_max_kernel<T><<<grid_dim(op, "rows", m, true), kThreads, 0, ctx.stream>>>(row_max, typed<T>(logits), v_local);
  });
  check_launch(ctx, op);
}

void cross_entropy_partials(const Context& ctx, float* partials, float* max, ActPtr exps, const float* gathered_max,
                            int64_t groups, ConstActPtr logits, const int32_t* targets, int64_t m, int64_t v_local,
                            int64_t v0) {
  const char* op = "cross_entropy_partials";
  require_nonnegative(op, "m", m);
  require_positive(op, "v_local", v_local);
  require_positive(op, "groups", groups);
  if (m == 0) return;
  with_storage(common_type(op, {exps, logits}), [&](auto t) {
    using T = decltype(t);
    partials_kernel<T><<<grid_dim(op, "rows", m, true), kThreads, 0, ctx.stream>>>(
        partials, max, typed<T>(exps), gathered_max, groups, typed<T>(logits), targets, m, v_local, v0);
  });
  check_launch(ctx, op);
}

void cross_entropy_loss(const Context& ctx, float* loss, const float* partials, const float* max, int64_t m) {
  require_nonnegative("cross_entropy_loss", "m", m);
  if (m == 0) return;
  loss_kernel<<<grid_for(m), kThreads, 0, ctx.stream>>>(loss, partials, max, m);
  check_launch(ctx, "cross_entropy_loss");
}

void cross_entropy_backward(const Context& ctx, ActPtr dlogits, ConstActPtr exps, const float* partials,
                            const int32_t* targets, int64_t m, int64_t v_local, int64_t v0, float scale) {
  const char* op = "cross_entropy_backward";
  require_nonnegative(op, "m", m);
  require_positive(op, "v_local", v_local);
  if (m == 0) return;
  with_storage(common_type(op, {dlogits, exps}), [&](auto t) {
    using T = decltype(t);
    backward_kernel<T><<<grid_for(m * v_local), kThreads, 0, ctx.stream>>>(typed<T>(dlogits), typed<T>(exps), partials,
                                                                           targets, m, v_local, v0, scale);
  });
  check_launch(ctx, op);
}

}  // namespace axonn::cuda
