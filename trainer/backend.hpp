#pragma once
// The device ops of the 4D GPT, one interface for every backend: CPU (trainer/cpu/, float32,
// OpenBLAS + plain loops) and CUDA (trainer/cuda/). Every op takes raw device pointers and
// sizes; ops are ordered (one stream) and only the copies to the host wait for the device.
//
// Conventions (see docs/parallel-plan.md for who holds which shard):
// - Row-major; shapes in the comments are the *local* shard of this rank.
// - Element types: activations, their gradients and the GEMMs' operands are ActPtr
//   (activation_ptr.hpp), of the type the op's caller allocated them in (the backend's
//   activation_type() for the model's buffers); parameters, their gradients and every
//   statistic (LayerNorm mean and rstd, attention's log-sum-exp, losses) are float32. A
//   backend throws BackendError for an activation type it does not compute in.
// - Sizes are int64_t element counts; pointers are from alloc() of the same backend.
// - Parameter gradients accumulate (+=), so micro-batches and tied weights add up; activation
//   gradients are overwritten (=), except LayerNorm's dx, which accumulates into the residual
//   stream's gradient (it also receives the skip path).
// - Ops whose result needs a sum or max over ranks are split into stages; the caller runs the
//   collective between them (all on the same buffers, in place). With one rank the stages
//   equal the plain op.
// - Outputs may alias an input only where the comment says so.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainer/activation_ptr.hpp"
#include "trainer/backend_error.hpp"

namespace axonn {

enum class Transpose { no, yes };

// One AdamW update (PyTorch's torch.optim.AdamW, decoupled weight decay):
//   g = grad·grad_scale;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   param −= lr·( (m/(1−β1^t)) / (sqrt(v/(1−β2^t)) + eps) + weight_decay·param )
// The caller runs the learning-rate schedule (lr per call) and gradient clipping
// (grad_scale = min(1, max_norm / global_norm)).
struct AdamWStep {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // used only where adamw(..., decay = true)
  int64_t t = 1;              // 1-based step count, for the bias correction
  float grad_scale = 1.0f;
};

// A point in a device backend's stream (a CUDA event recorded there): how long the device
// took between two marks is known once it has passed both (after synchronize()). For the
// traced steps' timeline (trainer/observed_backend.hpp), which times a device's ops without
// waiting for each.
class TimingMark {
 public:
  virtual ~TimingMark() = default;
  // Seconds from `earlier`'s point to this one's, on the device; both of the same backend.
  virtual double seconds_since(const TimingMark& earlier) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // True when device pointers are host pointers (the CPU backend): host code may then read
  // and write device buffers directly instead of staging copies.
  virtual bool device_is_host() const { return false; }
  // The type the model stores activations and their gradients in.
  virtual ElementType activation_type() const { return ElementType::float32; }

  // ---- memory (bytes). alloc: uninitialized, 64-byte aligned, nullptr for 0 bytes;
  // throws BackendError when out of memory. free(nullptr) does nothing.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void copy_to_host(void* dst_host, const void* src, size_t bytes) = 0;  // waits
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;               // device to device
  // dst (rows, cols) with row stride ld_dst = src (rows, cols) with row stride ld_src: moves a
  // block between layouts, e.g. a column shard gathered over z into its place in a wider row.
  virtual void copy_2d(ActPtr dst, int64_t ld_dst, ConstActPtr src, int64_t ld_src, int64_t rows, int64_t cols) = 0;
  // dst (n) = src in dst's type: a copy for float32, rounded to nearest even for bf16 (the
  // GEMMs' copy of the float32 master weights). dst and src do not overlap.
  virtual void convert(ActPtr dst, const float* src, int64_t n) = 0;
  virtual void memset_zero(void* ptr, size_t bytes) = 0;
  virtual void fill(float* x, float value, int64_t n) = 0;
  virtual void synchronize() = 0;
  // A mark at the end of the work queued so far, on a device backend; nullptr on a backend
  // whose ops finish when they return (the CPU's: the host clock times them).
  virtual std::unique_ptr<TimingMark> timing_mark() { return nullptr; }

  // ---- GEMM: C (m, n) = alpha·op(A)·op(B) + beta·C, op(A) (m, k), op(B) (k, n); lda, ldb,
  // ldc are the row strides of A, B, C as stored. beta = 0 ignores C (NaN in C is not read).
  // Linear layer with W (k, n):  Y = X·W        gemm(no,  no,  m, n, k, 1, X, k,  W, n, 0, Y, n)
  //                              dX = dY·W^T    gemm(no,  yes, m, k, n, 1, dY, n, W, n, 0, dX, k)
  //                              dW += X^T·dY   gemm(yes, no,  k, n, m, 1, X, k, dY, n, 1, dW, n)
  virtual void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, ConstActPtr a,
                    int64_t lda, ConstActPtr b, int64_t ldb, float beta, ActPtr c, int64_t ldc) = 0;

  // Y (m, n) = X (m, k)·W (k, n) + bias (n) on every row, all contiguous: a linear layer whose
  // output needs no reduction before its bias is added. gemm then bias_forward (the CPU's
  // bits); the CUDA backend does it in one GEMM (cuBLASLt's bias epilogue), one pass over Y
  // fewer.
  virtual void linear_forward(ActPtr y, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m, int64_t n,
                              int64_t k) {
    gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, x, k, w, n, 0.0f, y, n);
    bias_forward(y, bias, m, n, n);
  }
  // The weight and bias gradients of a linear layer Y = X·W + bias, X (m, k), dY (m, n):
  //   dW (k, n) = X^T·dY + beta·dW (beta 1 accumulates, 0 overwrites);
  //   dbias (n) += Σ_rows dY, skipped when dbias is null.
  // bias_backward then the dW GEMM (the CPU's bits); the CUDA backend has the GEMM sum dY's
  // rows as it reads them (cuBLASLt's BGRADA epilogue), one pass over dY fewer.
  virtual void linear_weight_grad(float* dw, float beta, float* dbias, ConstActPtr x, ConstActPtr dy, int64_t m,
                                  int64_t n, int64_t k) {
    if (dbias != nullptr) bias_backward(dbias, dy, m, n, n);
    gemm(Transpose::yes, Transpose::no, k, n, m, 1.0f, x, k, dy, n, beta, dw, n);
  }
  // The MLP's first layer and its GELU, under linear_forward's condition:
  //   pre (m, n) = X (m, k)·W (k, n) + bias (n),  out (m, n) = gelu(pre),  pre kept for backward.
  // linear_forward then gelu_forward (the CPU's bits); the CUDA backend writes both from one
  // GEMM (cuBLASLt's GELU_AUX_BIAS epilogue): pre is not read back.
  virtual void linear_gelu_forward(ActPtr pre, ActPtr out, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m,
                                   int64_t n, int64_t k) {
    linear_forward(pre, x, w, bias, m, n, k);
    gelu_forward(out, pre, m * n);
  }
  // The input gradient of a linear layer whose input was gelu(pre), through the GELU, when dX
  // needs no reduction before it (the layer's n-axis has size one):
  //   dpre (m, k) = (dY (m, n)·W (k, n)^T) ⊙ gelu'(pre (m, k)).
  // The dX GEMM then gelu_backward (the CPU's bits); the CUDA backend applies gelu' in the
  // GEMM (cuBLASLt's DGELU epilogue).
  virtual void linear_input_grad_gelu(ActPtr dpre, ConstActPtr dy, ConstActPtr w, ConstActPtr pre, int64_t m, int64_t n,
                                      int64_t k) {
    gemm(Transpose::no, Transpose::yes, m, k, n, 1.0f, dy, n, w, n, 0.0f, dpre, k);
    gelu_backward(dpre, pre, dpre, m * k);
  }

  // ---- bias and elementwise. The bias ops take the row stride ld of out/dout (n when
  // contiguous), so a bias can apply to a column block of a wider buffer (q, k or v inside
  // a packed qkv).
  // out (m, n) += bias (n)
  virtual void bias_forward(ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld) = 0;
  // dbias (n) += Σ_rows dout (m, n)
  virtual void bias_backward(float* dbias, ConstActPtr dout, int64_t m, int64_t n, int64_t ld) = 0;
  virtual void add(float* out, const float* a, const float* b, int64_t n) = 0;  // out = a + b (may alias a or b)
  virtual void scale(float* x, float alpha, int64_t n) = 0;                     // x *= alpha
  virtual void axpy(float* y, float alpha, const float* x, int64_t n) = 0;      // y += alpha·x

  // ---- reductions into a device scalar, out[0] += ..., so several buffers add up before
  // one all-reduce (loss for logging, global gradient norm for clipping).
  virtual void sum(float* out, const float* x, int64_t n) = 0;          // out[0] += Σ x
  virtual void sum_squares(float* out, const float* x, int64_t n) = 0;  // out[0] += Σ x²

  // ---- LayerNorm over rows of full width C whose columns are split over ranks: this rank
  // has x (m, c), c = C/G_x, and gamma, beta (c). Forward, 3 stages; the caller all-reduces
  // `sums` after (1) and `squares` after (2) over the ranks sharing the rows:
  // (1) sums (m) = Σ_j x[i, j] over the local columns.
  virtual void layernorm_row_sums(float* sums, ConstActPtr x, int64_t m, int64_t c) = 0;
  // (1) with the residual add before it, in one pass: x (m, c) = a + b (x may alias a or b),
  //     then sums as above; the same bits as add() then layernorm_row_sums().
  virtual void layernorm_residual_row_sums(ActPtr x, float* sums, ConstActPtr a, ConstActPtr b, int64_t m,
                                           int64_t c) = 0;
  // (2) mean (m) = sums / C (mean may alias sums); squares (m) = Σ_j (x[i, j] − mean[i])².
  virtual void layernorm_centered_squares(float* mean, float* squares, const float* sums, ConstActPtr x, int64_t m,
                                          int64_t c, int64_t C) = 0;
  // (3) rstd (m) = 1/sqrt(squares/C + eps) (rstd may alias squares);
  //     out (m, c) = (x − mean)·rstd·gamma + beta. mean and rstd are kept for backward.
  virtual void layernorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* mean, const float* squares,
                                   const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C,
                                   float eps) = 0;
  // Backward, 2 stages, x̂ = (x − mean)·rstd; the caller all-reduces `partials` between them:
  // (1) partials (m, 2) = (Σ_j dout·gamma, Σ_j dout·gamma·x̂) over the local columns.
  virtual void layernorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* mean,
                                           const float* rstd, const float* gamma, int64_t m, int64_t c) = 0;
  // (2) dx (m, c) += rstd·(dout·gamma − (partials[i,0] + x̂·partials[i,1])/C);
  //     dgamma (c) += Σ_rows dout·x̂;  dbeta (c) += Σ_rows dout.
  virtual void layernorm_backward_finish(ActPtr dx, float* dgamma, float* dbeta, const float* partials,
                                         ConstActPtr dout, ConstActPtr x, const float* mean, const float* rstd,
                                         const float* gamma, int64_t m, int64_t c, int64_t C) = 0;

  // ---- LayerNorm of whole rows (one rank holds all C columns: nothing to all-reduce), each
  // one op: the stages above in order, so the same bits; the CUDA backend runs each in one
  // kernel that reads its rows from memory once.
  // out (m, C) = LayerNorm(x); mean, rstd (m) kept for backward.
  virtual void layernorm_rows(ActPtr out, float* mean, float* rstd, ConstActPtr x, const float* gamma,
                              const float* beta, int64_t m, int64_t C, float eps) {
    layernorm_row_sums(mean, x, m, C);
    layernorm_centered_squares(mean, rstd, mean, x, m, C, C);
    layernorm_normalize(out, rstd, x, mean, rstd, gamma, beta, m, C, C, eps);
  }
  // x (m, C) = a + b (x may alias a or b), then layernorm_rows of x.
  virtual void residual_layernorm_rows(ActPtr x, ActPtr out, float* mean, float* rstd, ConstActPtr a, ConstActPtr b,
                                       const float* gamma, const float* beta, int64_t m, int64_t C, float eps) {
    layernorm_residual_row_sums(x, mean, a, b, m, C);
    layernorm_centered_squares(mean, rstd, mean, x, m, C, C);
    layernorm_normalize(out, rstd, x, mean, rstd, gamma, beta, m, C, C, eps);
  }
  // Backward of layernorm_rows: dx (m, C) +=, dgamma, dbeta (C) += as the two backward
  // stages; partials (m, 2) is their scratch (the stage-1 values on return).
  virtual void layernorm_rows_backward(ActPtr dx, float* dgamma, float* dbeta, float* partials, ConstActPtr dout,
                                       ConstActPtr x, const float* mean, const float* rstd, const float* gamma,
                                       int64_t m, int64_t C) {
    layernorm_backward_partials(partials, dout, x, mean, rstd, gamma, m, C);
    layernorm_backward_finish(dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, C, C);
  }

  // ---- RMSNorm (Llama's: no mean, no beta) over rows of full width C whose columns are split
  // over ranks as LayerNorm's: this rank has x (m, c), c = C/G_x, and gamma (c). Forward, 2
  // stages; the caller all-reduces `squares` after (1) over the ranks sharing the rows:
  // (1) squares (m) = Σ_j x[i, j]² over the local columns.
  virtual void rmsnorm_row_squares(float* squares, ConstActPtr x, int64_t m, int64_t c) = 0;
  // (1) with the residual add before it, in one pass: x (m, c) = a + b (x may alias a or b),
  //     then squares as above; the same bits as add() then rmsnorm_row_squares().
  virtual void rmsnorm_residual_row_squares(ActPtr x, float* squares, ConstActPtr a, ConstActPtr b, int64_t m,
                                            int64_t c) = 0;
  // (2) rstd (m) = 1/sqrt(squares/C + eps) (rstd may alias squares); out (m, c) = x·rstd·gamma.
  //     rstd is kept for backward.
  virtual void rmsnorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* squares, const float* gamma,
                                 int64_t m, int64_t c, int64_t C, float eps) = 0;
  // Backward, 2 stages, x̂ = x·rstd; the caller all-reduces `partials` between them:
  // (1) partials (m) = Σ_j dout·gamma·x̂ over the local columns.
  virtual void rmsnorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* rstd,
                                         const float* gamma, int64_t m, int64_t c) = 0;
  // (2) dx (m, c) += rstd·(dout·gamma − x̂·partials[i]/C) (accumulates, as LayerNorm's dx);
  //     dgamma (c) += Σ_rows dout·x̂.
  virtual void rmsnorm_backward_finish(ActPtr dx, float* dgamma, const float* partials, ConstActPtr dout, ConstActPtr x,
                                       const float* rstd, const float* gamma, int64_t m, int64_t c, int64_t C) = 0;

  // ---- RMSNorm of whole rows (one rank holds all C columns), each one op: the stages above
  // in order, so the same bits; the CUDA backend runs each in one kernel per row pass.
  // out (m, C) = RMSNorm(x); rstd (m) kept for backward.
  virtual void rmsnorm_rows(ActPtr out, float* rstd, ConstActPtr x, const float* gamma, int64_t m, int64_t C,
                            float eps) {
    rmsnorm_row_squares(rstd, x, m, C);
    rmsnorm_normalize(out, rstd, x, rstd, gamma, m, C, C, eps);
  }
  // x (m, C) = a + b (x may alias a or b), then rmsnorm_rows of x.
  virtual void residual_rmsnorm_rows(ActPtr x, ActPtr out, float* rstd, ConstActPtr a, ConstActPtr b,
                                     const float* gamma, int64_t m, int64_t C, float eps) {
    rmsnorm_residual_row_squares(x, rstd, a, b, m, C);
    rmsnorm_normalize(out, rstd, x, rstd, gamma, m, C, C, eps);
  }
  // Backward of rmsnorm_rows: dx (m, C) +=, dgamma (C) += as the two backward stages;
  // partials (m) is their scratch (the stage-1 values on return).
  virtual void rmsnorm_rows_backward(ActPtr dx, float* dgamma, float* partials, ConstActPtr dout, ConstActPtr x,
                                     const float* rstd, const float* gamma, int64_t m, int64_t C) {
    rmsnorm_backward_partials(partials, dout, x, rstd, gamma, m, C);
    rmsnorm_backward_finish(dx, dgamma, partials, dout, x, rstd, gamma, m, C, C);
  }

  // ---- GELU, tanh approximation (GPT-2): 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
  // out = gelu(x), out may alias x
  virtual void gelu_forward(ActPtr out, ConstActPtr x, int64_t n) = 0;
  // dx = gelu'(x)·dout, dx may alias dout
  virtual void gelu_backward(ActPtr dx, ConstActPtr x, ConstActPtr dout, int64_t n) = 0;

  // ---- SwiGLU (Llama's MLP activation): gate_up (m, 2f) holds per row [gate (f) | up (f)],
  // a fused gate/up projection's output (this rank's columns of both).
  // out (m, f) = silu(gate)·up, silu(g) = g/(1 + exp(−g)).
  virtual void swiglu_forward(ActPtr out, ConstActPtr gate_up, int64_t m, int64_t f) = 0;
  // dgate_up (m, 2f) = [dout·up·silu'(gate) | dout·silu(gate)], silu'(g) = σ(g)·(1 + g·(1 − σ(g)));
  // overwritten; overlaps neither gate_up nor dout.
  virtual void swiglu_backward(ActPtr dgate_up, ConstActPtr gate_up, ConstActPtr dout, int64_t m, int64_t f) = 0;

  // ---- rotary position embedding (RoPE, the interleaved pairs of Meta's Llama reference), in
  // place on x, a (B, T, heads, d) view with row stride ld (q or k inside a packed qkv: ld
  // elements from one token to the next); d even. cos_sin (T, d/2, 2) float32 holds
  // [cos θ_{t,i}, sin θ_{t,i}] for position t (0 .. T−1 within its sequence) and pair i
  // (trainer/model/rope_table.hpp). Pair (x0, x1) = elements (2i, 2i + 1) of a head:
  //   forward   (x0, x1) <- (x0·cos − x1·sin, x0·sin + x1·cos)
  //   backward  (g0, g1) <- (g0·cos + g1·sin, −g0·sin + g1·cos), the transpose (rotation by −θ).
  // Columns of a row outside the heads·d it rotates are not touched.
  virtual void rope_forward(ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                            int64_t ld) = 0;
  virtual void rope_backward(ActPtr dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                             int64_t ld) = 0;

  // ---- causal self-attention on this rank's h query heads and kv key/value heads of size d,
  // scale 1/sqrt(d); h a multiple of kv, query head i attending key/value head i/g, g = h/kv
  // (grouped-query attention; kv = h is multi-head attention, kv = 1 multi-query).
  // q is a (B, T, h, d) view, k and v (B, T, kv, d) views, all with row stride ld (elements
  // from one token to the next); within a row the key/value groups are group_stride elements
  // apart: query head i at q + (i/g)·group_stride + (i mod g)·d, key/value head j at
  // k + j·group_stride and v + j·group_stride.
  //   multi-head (GPT-2), a packed qkv buffer (B, T, 3·h·d) [q (h·d) | k (h·d) | v (h·d)]:
  //   q = qkv, k = qkv + h·d, v = qkv + 2·h·d, ld = 3·h·d, group_stride = d;
  //   three buffers (B, T, h·d): ld = h·d, kv = h, group_stride = d;
  //   grouped (Megatron-LM), per token and group [its g query heads (g·d) | k (d) | v (d)]:
  //   q = qkv, k = qkv + g·d, v = qkv + (g + 1)·d, ld = kv·(g + 2)·d,
  //   group_stride = (g + 2)·d.
  // No (T, T) matrix is kept (flash-style): out (B, T, h·d), head i at i·d; lse (B, h, T)
  // float32 is each query row's log Σ_{j<=t} exp(s_tj), s = q·k/sqrt(d), kept for backward.
  virtual void attention_forward(ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld,
                                 int64_t B, int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) = 0;
  // dq, dk, dv: views like q, k, v (same ld and group_stride), overwritten, and overlapping
  // none of q, k, v, dout (the kernels read those in place while they write); elements of
  // their rows outside the heads are not touched. dk and dv of a key/value head are the sums
  // over its g query heads. dout and forward's out (B, T, h·d), forward's lse (B, h, T). The
  // probabilities are recomputed, P = exp(s − lse), and the softmax backward uses
  // D = rowsum(dout ⊙ out).
  virtual void attention_backward(ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out, const float* lse,
                                  ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B, int64_t T,
                                  int64_t h, int64_t kv, int64_t d, int64_t group_stride) = 0;

  // ---- vocab-parallel token embedding: this rank holds the table rows [v0, v0 + v_local)
  // as table (v_local, c), in the activations' type (the GEMMs' copy of wte, which the LM
  // head shares). out (m, c) = the row of each token in range, 0 for the others; the caller
  // all-reduces out over the ranks holding the other rows.
  virtual void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr table, int64_t m, int64_t c, int64_t v0,
                                 int64_t v_local) = 0;
  // dtable (v_local, c) += dout rows of the tokens in range (scatter-add).
  virtual void embedding_backward(float* dtable, ConstActPtr dout, const int32_t* tokens, int64_t m, int64_t c,
                                  int64_t v0, int64_t v_local) = 0;
  // Position embedding: out (B, T, c) += wpe (T, c);  dwpe (T, c) += Σ_b dout (B, T, c).
  virtual void position_forward(ActPtr out, const float* wpe, int64_t B, int64_t T, int64_t c) = 0;
  virtual void position_backward(float* dwpe, ConstActPtr dout, int64_t B, int64_t T, int64_t c) = 0;

  // ---- vocab-parallel softmax cross-entropy: logits (m, v_local) for the vocab columns
  // [v0, v0 + v_local), targets (m) are global token ids. Forward, 3 stages:
  // (1) row_max (m) = max over the local columns. The caller all-gathers it over the vocab
  //     ranks into gathered_max (groups, m), rank r's block at r·m.
  virtual void cross_entropy_row_max(float* row_max, ConstActPtr logits, int64_t m, int64_t v_local) = 0;
  // (2) max (m) = max over the groups; exps (m, v_local) = exp(logits − max) (may alias
  //     logits); partials (m, 2) = (Σ_j exps, the target's logit if the target is in this
  //     rank's range else 0). The caller all-reduces partials.
  virtual void cross_entropy_partials(float* partials, float* max, ActPtr exps, const float* gathered_max,
                                      int64_t groups, ConstActPtr logits, const int32_t* targets, int64_t m,
                                      int64_t v_local, int64_t v0) = 0;
  // (3) loss (m) = log(partials[i,0]) + max[i] − partials[i,1].
  virtual void cross_entropy_loss(float* loss, const float* partials, const float* max, int64_t m) = 0;
  // Backward (local): dlogits (m, v_local) = (exps/partials[i,0] − onehot(target))·scale, with
  // scale = dloss per token (1/total tokens for a mean); dlogits may alias exps.
  virtual void cross_entropy_backward(ActPtr dlogits, ConstActPtr exps, const float* partials, const int32_t* targets,
                                      int64_t m, int64_t v_local, int64_t v0, float scale) = 0;

  // ---- softmax cross-entropy of whole rows (one rank holds the vocabulary: v0 = 0,
  // v_local = V), forward and backward in one op: loss (m) as the stages give it, and logits
  // (m, V) replaced by dlogits = (softmax − onehot(target))·scale. max (m) and partials (m, 2)
  // are scratch; loss holds the row maxima until the end. The stages in order (the CPU's
  // bits); the CUDA backend reads each row twice and writes it once (a running max and sum),
  // against five passes.
  virtual void cross_entropy_rows(float* loss, ActPtr logits, const int32_t* targets, int64_t m, int64_t V, float scale,
                                  float* max, float* partials) {
    cross_entropy_row_max(loss, logits, m, V);
    cross_entropy_partials(partials, max, logits, loss, 1, logits, targets, m, V, 0);
    cross_entropy_loss(loss, partials, max, m);
    cross_entropy_backward(logits, logits, partials, targets, m, V, 0, scale);
  }

  // ---- mixture of experts (docs/moe.md): E experts, each token routed to k = top_k (1 or 2).
  // The host computes the routing plan (which permuted row holds which token); these ops do
  // the per-row device work around the experts' GEMMs. rows, slots and experts are int32
  // device arrays.
  // Router logits in float32 whatever the activations' type: logits (m, E) = x (m, c)·w (c, E),
  // over this rank's c columns of x (rows of w); the caller all-reduces logits over x.
  virtual void router_logits(float* logits, ConstActPtr x, const float* w, int64_t m, int64_t c, int64_t E) = 0;
  // Router backward, from float32 dlogits (m, E): dw (c, E) += x^T·dlogits;
  // dx (m, c) += dlogits·w^T (accumulates: the experts' path adds into the same gradient).
  virtual void router_backward(ActPtr dx, float* dw, const float* dlogits, ConstActPtr x, const float* w, int64_t m,
                               int64_t c, int64_t E) = 0;
  // probs (m, E) = softmax of each row of logits (probs may alias logits); experts (m, k) =
  // the indices of the k largest probabilities, largest first, ties to the lower index;
  // gates (m, k) = their probabilities, divided by their sum when k = 2 (k = 1: the
  // probability itself, as Switch).
  virtual void router_top_k(float* probs, int32_t* experts, float* gates, const float* logits, int64_t m, int64_t E,
                            int64_t k) = 0;
  // Router backward to the logits: dprobs (m, E) = coef (E) on every row (the balance loss's
  // d/dprobs; null: zero) plus dgates (m, k) taken back through the gates (k = 2: through the
  // renormalization g_s = p_s / (p_0 + p_1)); then dlogits (m, E) = p ⊙ (dprobs − Σ_j p_j·dprobs_j).
  virtual void router_logits_grad(float* dlogits, const float* probs, const int32_t* experts, const float* dgates,
                                  const float* coef, int64_t m, int64_t E, int64_t k) = 0;
  // Dispatch: out (n, c) row j = in (m, c) row rows[j], times scale[j] when scale is not null;
  // a row index outside [0, m) gives a row of zeros (a padded slot).
  virtual void gather_rows(ActPtr out, ConstActPtr in, const int32_t* rows, const float* scale, int64_t n, int64_t m,
                           int64_t c) = 0;
  // Combine: out (m, c) row t += Σ_{s<k, slots[t·k+s] ≥ 0} g·in (n, c) row slots[t·k+s], with
  // g = gates[t·k+s], or 1 when gates is null (then it is also dispatch's backward). One
  // gather per output row, no atomics, so the sum's order and bits are fixed. A slot outside
  // [0, n) is dropped like a negative one.
  virtual void combine_rows(ActPtr out, ConstActPtr in, const int32_t* slots, const float* gates, int64_t m, int64_t k,
                            int64_t n, int64_t c) = 0;
  // Gate gradient: dgates (m, k) = Σ over this rank's c columns of dout (m, c) row t ⊙ in (n, c)
  // row slots[t·k+s] (0 where the slot is dropped); the caller all-reduces it over x.
  virtual void combine_gates_grad(float* dgates, ConstActPtr dout, ConstActPtr in, const int32_t* slots, int64_t m,
                                  int64_t k, int64_t n, int64_t c) = 0;

  // ---- AdamW on one buffer of n params (see AdamWStep), m and v (n) updated in place;
  // decay = false skips the weight decay (GPT-2 decays the 2-D weights only: not biases,
  // LayerNorm gamma/beta).
  virtual void adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
                     bool decay) = 0;
};

// Owns `count` elements of T on a backend; move-only. T is float, int32_t (token ids) or
// std::byte (elements of a type chosen at run time, e.g. activations).
template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "device buffers hold plain values");

 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, size_t count) : backend_(&backend), count_(count) {
    if (count > std::numeric_limits<size_t>::max() / sizeof(T))
      throw BackendError("DeviceBuffer: " + std::to_string(count) + " elements overflow size_t");
    ptr_ = static_cast<T*>(backend.alloc(count * sizeof(T)));
  }
  DeviceBuffer(Backend& backend, const std::vector<T>& host) : DeviceBuffer(backend, host.size()) { upload(host); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : backend_(std::exchange(o.backend_, nullptr)),
        ptr_(std::exchange(o.ptr_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = std::exchange(o.backend_, nullptr);
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    if (host.size() != count_)
      throw BackendError("DeviceBuffer::upload: " + std::to_string(host.size()) + " elements into a buffer of " +
                         std::to_string(count_));
    if (count_ > 0) backend_->copy_to_device(ptr_, host.data(), bytes());
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) backend_->copy_to_host(host.data(), ptr_, bytes());
    return host;
  }

 private:
  void reset() {
    if (backend_ != nullptr) backend_->free(ptr_);
    backend_ = nullptr;
    ptr_ = nullptr;
    count_ = 0;
  }

  Backend* backend_ = nullptr;
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace axonn
