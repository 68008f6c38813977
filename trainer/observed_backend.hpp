#pragma once
// A Backend that forwards every op to another backend and tells an OpObserver what ran, when
// and for how long: the op's name ("layernorm backward", or "gemm NN 256x192x64 + bias" for a
// GEMM, with its FLOPs), its start and end. What observes: the trainer's timeline of traced
// steps (trainer/train/trace_ops.hpp) and `bench_train_* --profile`'s per-op totals.
//
// While the observer says it is not observing, an op costs one virtual call more and reads no
// clock. While it is, either
//   - the backend is synchronized after each op and the host clock read (on a GPU the op's own
//     time is then measured, not its launch; on the CPU the sync is a no-op), or
//   - where the observer takes device marks and the backend has them (CUDA), a mark is put on
//     the stream before and after the op, nothing waits, and the observer resolves the marks
//     once the device has passed them (device_op);
// so observe only the steps you look at.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "trainer/backend.hpp"

namespace axonn {

class OpObserver {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~OpObserver() = default;
  virtual bool observing() const = 0;
  // flops: a GEMM's 2·m·n·k (with or without an epilogue), else 0.
  virtual void op(const std::string& name, double flops, Clock::time_point start, Clock::time_point end) = 0;
  // Whether this observer wants a device backend's ops as marks on its stream (device_op)
  // rather than synchronized and timed by the host clock (op).
  virtual bool takes_device_marks() const { return false; }
  virtual void device_op(const std::string& name, double flops, std::unique_ptr<TimingMark> start,
                         std::unique_ptr<TimingMark> end) {
    (void)name, (void)flops, (void)start, (void)end;
  }
};

class ObservedBackend final : public Backend {
 public:
  ObservedBackend(Backend& inner, OpObserver& observer) : inner_(inner), observer_(observer) {}
  Backend& inner() { return inner_; }

  const char* name() const override { return inner_.name(); }
  bool device_is_host() const override { return inner_.device_is_host(); }
  ElementType activation_type() const override { return inner_.activation_type(); }
  void* alloc(size_t bytes) override { return inner_.alloc(bytes); }
  void free(void* ptr) override { inner_.free(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    observed("copy_to_device", [&] { inner_.copy_to_device(dst, src, bytes); });
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    observed("copy_to_host", [&] { inner_.copy_to_host(dst, src, bytes); });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    observed("copy", [&] { inner_.copy(dst, src, bytes); });
  }
  void copy_2d(ActPtr dst, int64_t ld_dst, ConstActPtr src, int64_t ld_src, int64_t rows, int64_t cols) override {
    observed("copy_2d", [&] { inner_.copy_2d(dst, ld_dst, src, ld_src, rows, cols); });
  }
  void convert(ActPtr dst, const float* src, int64_t n) override {
    observed("convert", [&] { inner_.convert(dst, src, n); });
  }
  void memset_zero(void* ptr, size_t bytes) override {
    observed("memset_zero", [&] { inner_.memset_zero(ptr, bytes); });
  }
  void fill(float* x, float value, int64_t n) override {
    observed("fill", [&] { inner_.fill(x, value, n); });
  }
  void synchronize() override { inner_.synchronize(); }
  std::unique_ptr<TimingMark> timing_mark() override { return inner_.timing_mark(); }

  void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, ConstActPtr a, int64_t lda,
            ConstActPtr b, int64_t ldb, float beta, ActPtr c, int64_t ldc) override {
    static const char* const kinds[2][2] = {{"gemm NN", "gemm NT"}, {"gemm TN", "gemm TT"}};
    const char* kind = kinds[ta == Transpose::yes ? 1 : 0][tb == Transpose::yes ? 1 : 0];
    observed_gemm(kind, m, n, k, "", [&] { inner_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  }

  void linear_forward(ActPtr y, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m, int64_t n,
                      int64_t k) override {
    observed_gemm("gemm NN", m, n, k, " + bias", [&] { inner_.linear_forward(y, x, w, bias, m, n, k); });
  }
  void linear_weight_grad(float* dw, float beta, float* dbias, ConstActPtr x, ConstActPtr dy, int64_t m, int64_t n,
                          int64_t k) override {
    observed_gemm("gemm TN", k, n, m, dbias != nullptr ? " + bias grad" : "",
                  [&] { inner_.linear_weight_grad(dw, beta, dbias, x, dy, m, n, k); });
  }
  void linear_gelu_forward(ActPtr pre, ActPtr out, ConstActPtr x, ConstActPtr w, const float* bias, int64_t m,
                           int64_t n, int64_t k) override {
    observed_gemm("gemm NN", m, n, k, " + bias + gelu",
                  [&] { inner_.linear_gelu_forward(pre, out, x, w, bias, m, n, k); });
  }
  void linear_input_grad_gelu(ActPtr dpre, ConstActPtr dy, ConstActPtr w, ConstActPtr pre, int64_t m, int64_t n,
                              int64_t k) override {
    observed_gemm("gemm NT", m, k, n, " + dgelu", [&] { inner_.linear_input_grad_gelu(dpre, dy, w, pre, m, n, k); });
  }
  void bias_forward(ActPtr out, const float* bias, int64_t m, int64_t n, int64_t ld) override {
    observed("bias_forward", [&] { inner_.bias_forward(out, bias, m, n, ld); });
  }
  void bias_backward(float* dbias, ConstActPtr dout, int64_t m, int64_t n, int64_t ld) override {
    observed("bias_backward", [&] { inner_.bias_backward(dbias, dout, m, n, ld); });
  }
  void add(float* out, const float* a, const float* b, int64_t n) override {
    observed("add", [&] { inner_.add(out, a, b, n); });
  }
  void scale(float* x, float alpha, int64_t n) override {
    observed("scale", [&] { inner_.scale(x, alpha, n); });
  }
  void axpy(float* y, float alpha, const float* x, int64_t n) override {
    observed("axpy", [&] { inner_.axpy(y, alpha, x, n); });
  }
  void sum(float* out, const float* x, int64_t n) override {
    observed("sum", [&] { inner_.sum(out, x, n); });
  }
  void sum_squares(float* out, const float* x, int64_t n) override {
    observed("sum_squares", [&] { inner_.sum_squares(out, x, n); });
  }

  void layernorm_residual_row_sums(ActPtr x, float* sums, ConstActPtr a, ConstActPtr b, int64_t m, int64_t c) override {
    observed("layernorm forward", [&] { inner_.layernorm_residual_row_sums(x, sums, a, b, m, c); });
  }
  void layernorm_row_sums(float* sums, ConstActPtr x, int64_t m, int64_t c) override {
    observed("layernorm forward", [&] { inner_.layernorm_row_sums(sums, x, m, c); });
  }
  void layernorm_centered_squares(float* mean, float* squares, const float* sums, ConstActPtr x, int64_t m, int64_t c,
                                  int64_t C) override {
    observed("layernorm forward", [&] { inner_.layernorm_centered_squares(mean, squares, sums, x, m, c, C); });
  }
  void layernorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* mean, const float* squares,
                           const float* gamma, const float* beta, int64_t m, int64_t c, int64_t C, float eps) override {
    observed("layernorm forward",
             [&] { inner_.layernorm_normalize(out, rstd, x, mean, squares, gamma, beta, m, c, C, eps); });
  }
  void layernorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* mean,
                                   const float* rstd, const float* gamma, int64_t m, int64_t c) override {
    observed("layernorm backward",
             [&] { inner_.layernorm_backward_partials(partials, dout, x, mean, rstd, gamma, m, c); });
  }
  void layernorm_backward_finish(ActPtr dx, float* dgamma, float* dbeta, const float* partials, ConstActPtr dout,
                                 ConstActPtr x, const float* mean, const float* rstd, const float* gamma, int64_t m,
                                 int64_t c, int64_t C) override {
    observed("layernorm backward", [&] {
      inner_.layernorm_backward_finish(dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, c, C);
    });
  }
  void layernorm_rows(ActPtr out, float* mean, float* rstd, ConstActPtr x, const float* gamma, const float* beta,
                      int64_t m, int64_t C, float eps) override {
    observed("layernorm forward", [&] { inner_.layernorm_rows(out, mean, rstd, x, gamma, beta, m, C, eps); });
  }
  void residual_layernorm_rows(ActPtr x, ActPtr out, float* mean, float* rstd, ConstActPtr a, ConstActPtr b,
                               const float* gamma, const float* beta, int64_t m, int64_t C, float eps) override {
    observed("layernorm forward",
             [&] { inner_.residual_layernorm_rows(x, out, mean, rstd, a, b, gamma, beta, m, C, eps); });
  }
  void layernorm_rows_backward(ActPtr dx, float* dgamma, float* dbeta, float* partials, ConstActPtr dout, ConstActPtr x,
                               const float* mean, const float* rstd, const float* gamma, int64_t m,
                               int64_t C) override {
    observed("layernorm backward",
             [&] { inner_.layernorm_rows_backward(dx, dgamma, dbeta, partials, dout, x, mean, rstd, gamma, m, C); });
  }

  void rmsnorm_row_squares(float* squares, ConstActPtr x, int64_t m, int64_t c) override {
    observed("rmsnorm forward", [&] { inner_.rmsnorm_row_squares(squares, x, m, c); });
  }
  void rmsnorm_residual_row_squares(ActPtr x, float* squares, ConstActPtr a, ConstActPtr b, int64_t m,
                                    int64_t c) override {
    observed("rmsnorm forward", [&] { inner_.rmsnorm_residual_row_squares(x, squares, a, b, m, c); });
  }
  void rmsnorm_normalize(ActPtr out, float* rstd, ConstActPtr x, const float* squares, const float* gamma, int64_t m,
                         int64_t c, int64_t C, float eps) override {
    observed("rmsnorm forward", [&] { inner_.rmsnorm_normalize(out, rstd, x, squares, gamma, m, c, C, eps); });
  }
  void rmsnorm_backward_partials(float* partials, ConstActPtr dout, ConstActPtr x, const float* rstd,
                                 const float* gamma, int64_t m, int64_t c) override {
    observed("rmsnorm backward", [&] { inner_.rmsnorm_backward_partials(partials, dout, x, rstd, gamma, m, c); });
  }
  void rmsnorm_backward_finish(ActPtr dx, float* dgamma, const float* partials, ConstActPtr dout, ConstActPtr x,
                               const float* rstd, const float* gamma, int64_t m, int64_t c, int64_t C) override {
    observed("rmsnorm backward",
             [&] { inner_.rmsnorm_backward_finish(dx, dgamma, partials, dout, x, rstd, gamma, m, c, C); });
  }
  void rmsnorm_rows(ActPtr out, float* rstd, ConstActPtr x, const float* gamma, int64_t m, int64_t C,
                    float eps) override {
    observed("rmsnorm forward", [&] { inner_.rmsnorm_rows(out, rstd, x, gamma, m, C, eps); });
  }
  void residual_rmsnorm_rows(ActPtr x, ActPtr out, float* rstd, ConstActPtr a, ConstActPtr b, const float* gamma,
                             int64_t m, int64_t C, float eps) override {
    observed("rmsnorm forward", [&] { inner_.residual_rmsnorm_rows(x, out, rstd, a, b, gamma, m, C, eps); });
  }
  void rmsnorm_rows_backward(ActPtr dx, float* dgamma, float* partials, ConstActPtr dout, ConstActPtr x,
                             const float* rstd, const float* gamma, int64_t m, int64_t C) override {
    observed("rmsnorm backward",
             [&] { inner_.rmsnorm_rows_backward(dx, dgamma, partials, dout, x, rstd, gamma, m, C); });
  }

  void gelu_forward(ActPtr out, ConstActPtr x, int64_t n) override {
    observed("gelu_forward", [&] { inner_.gelu_forward(out, x, n); });
  }
  void gelu_backward(ActPtr dx, ConstActPtr x, ConstActPtr dout, int64_t n) override {
    observed("gelu_backward", [&] { inner_.gelu_backward(dx, x, dout, n); });
  }

  void swiglu_forward(ActPtr out, ConstActPtr gate_up, int64_t m, int64_t f) override {
    observed("swiglu_forward", [&] { inner_.swiglu_forward(out, gate_up, m, f); });
  }
  void swiglu_backward(ActPtr dgate_up, ConstActPtr gate_up, ConstActPtr dout, int64_t m, int64_t f) override {
    observed("swiglu_backward", [&] { inner_.swiglu_backward(dgate_up, gate_up, dout, m, f); });
  }
  void rope_forward(ActPtr x, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                    int64_t ld) override {
    observed("rope_forward", [&] { inner_.rope_forward(x, cos_sin, B, T, heads, d, ld); });
  }
  void rope_backward(ActPtr dx, const float* cos_sin, int64_t B, int64_t T, int64_t heads, int64_t d,
                     int64_t ld) override {
    observed("rope_backward", [&] { inner_.rope_backward(dx, cos_sin, B, T, heads, d, ld); });
  }

  void attention_forward(ActPtr out, float* lse, ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B,
                         int64_t T, int64_t h, int64_t kv, int64_t d, int64_t group_stride) override {
    observed("attention_forward",
             [&] { inner_.attention_forward(out, lse, q, k, v, ld, B, T, h, kv, d, group_stride); });
  }
  void attention_backward(ActPtr dq, ActPtr dk, ActPtr dv, ConstActPtr dout, ConstActPtr out, const float* lse,
                          ConstActPtr q, ConstActPtr k, ConstActPtr v, int64_t ld, int64_t B, int64_t T, int64_t h,
                          int64_t kv, int64_t d, int64_t group_stride) override {
    observed("attention_backward",
             [&] { inner_.attention_backward(dq, dk, dv, dout, out, lse, q, k, v, ld, B, T, h, kv, d, group_stride); });
  }

  void embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr table, int64_t m, int64_t c, int64_t v0,
                         int64_t v_local) override {
    observed("embedding", [&] { inner_.embedding_forward(out, tokens, table, m, c, v0, v_local); });
  }
  void embedding_backward(float* dtable, ConstActPtr dout, const int32_t* tokens, int64_t m, int64_t c, int64_t v0,
                          int64_t v_local) override {
    observed("embedding", [&] { inner_.embedding_backward(dtable, dout, tokens, m, c, v0, v_local); });
  }
  void position_forward(ActPtr out, const float* wpe, int64_t B, int64_t T, int64_t c) override {
    observed("embedding", [&] { inner_.position_forward(out, wpe, B, T, c); });
  }
  void position_backward(float* dwpe, ConstActPtr dout, int64_t B, int64_t T, int64_t c) override {
    observed("embedding", [&] { inner_.position_backward(dwpe, dout, B, T, c); });
  }

  void cross_entropy_row_max(float* row_max, ConstActPtr logits, int64_t m, int64_t v_local) override {
    observed("cross_entropy", [&] { inner_.cross_entropy_row_max(row_max, logits, m, v_local); });
  }
  void cross_entropy_partials(float* partials, float* max, ActPtr exps, const float* gathered_max, int64_t groups,
                              ConstActPtr logits, const int32_t* targets, int64_t m, int64_t v_local,
                              int64_t v0) override {
    observed("cross_entropy", [&] {
      inner_.cross_entropy_partials(partials, max, exps, gathered_max, groups, logits, targets, m, v_local, v0);
    });
  }
  void cross_entropy_loss(float* loss, const float* partials, const float* max, int64_t m) override {
    observed("cross_entropy", [&] { inner_.cross_entropy_loss(loss, partials, max, m); });
  }
  void cross_entropy_backward(ActPtr dlogits, ConstActPtr exps, const float* partials, const int32_t* targets,
                              int64_t m, int64_t v_local, int64_t v0, float scale) override {
    observed("cross_entropy",
             [&] { inner_.cross_entropy_backward(dlogits, exps, partials, targets, m, v_local, v0, scale); });
  }
  void cross_entropy_rows(float* loss, ActPtr logits, const int32_t* targets, int64_t m, int64_t V, float scale,
                          float* max, float* partials) override {
    observed("cross_entropy", [&] { inner_.cross_entropy_rows(loss, logits, targets, m, V, scale, max, partials); });
  }

  void router_logits(float* logits, ConstActPtr x, const float* w, int64_t m, int64_t c, int64_t E) override {
    observed("router", [&] { inner_.router_logits(logits, x, w, m, c, E); });
  }
  void router_backward(ActPtr dx, float* dw, const float* dlogits, ConstActPtr x, const float* w, int64_t m, int64_t c,
                       int64_t E) override {
    observed("router", [&] { inner_.router_backward(dx, dw, dlogits, x, w, m, c, E); });
  }
  void router_top_k(float* probs, int32_t* experts, float* gates, const float* logits, int64_t m, int64_t E,
                    int64_t k) override {
    observed("router", [&] { inner_.router_top_k(probs, experts, gates, logits, m, E, k); });
  }
  void router_logits_grad(float* dlogits, const float* probs, const int32_t* experts, const float* dgates,
                          const float* coef, int64_t m, int64_t E, int64_t k) override {
    observed("router", [&] { inner_.router_logits_grad(dlogits, probs, experts, dgates, coef, m, E, k); });
  }
  void gather_rows(ActPtr out, ConstActPtr in, const int32_t* rows, const float* scale, int64_t n, int64_t m,
                   int64_t c) override {
    observed("moe_dispatch", [&] { inner_.gather_rows(out, in, rows, scale, n, m, c); });
  }
  void combine_rows(ActPtr out, ConstActPtr in, const int32_t* slots, const float* gates, int64_t m, int64_t k,
                    int64_t n, int64_t c) override {
    observed("moe_combine", [&] { inner_.combine_rows(out, in, slots, gates, m, k, n, c); });
  }
  void combine_gates_grad(float* dgates, ConstActPtr dout, ConstActPtr in, const int32_t* slots, int64_t m, int64_t k,
                          int64_t n, int64_t c) override {
    observed("moe_combine", [&] { inner_.combine_gates_grad(dgates, dout, in, slots, m, k, n, c); });
  }

  void adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
             bool decay) override {
    observed("adamw", [&] { inner_.adamw(param, grad, m, v, n, step, decay); });
  }

 private:
  template <typename F>
  void observed(const char* name, F&& f) {
    if (!observer_.observing()) return f();
    timed(name, 0.0, std::forward<F>(f));
  }
  // A GEMM (m, n, k) with what its epilogue adds ("" for none), named by shape and counted
  // with its FLOPs, so fused GEMMs are told apart from the plain ones.
  template <typename F>
  void observed_gemm(const char* kind, int64_t m, int64_t n, int64_t k, const char* epilogue, F&& f) {
    if (!observer_.observing()) return f();
    const std::string name =
        std::string(kind) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + epilogue;
    timed(name, 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k), std::forward<F>(f));
  }
  template <typename F>
  void timed(const std::string& name, double flops, F&& f) {
    if (observer_.takes_device_marks()) {
      if (std::unique_ptr<TimingMark> start = inner_.timing_mark()) {
        f();
        observer_.device_op(name, flops, std::move(start), inner_.timing_mark());
        return;
      }
    }
    const auto start = OpObserver::Clock::now();
    f();
    inner_.synchronize();
    observer_.op(name, flops, start, OpObserver::Clock::now());
  }

  Backend& inner_;
  OpObserver& observer_;
};

}  // namespace axonn
