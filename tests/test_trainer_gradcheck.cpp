// A tiny GPT-2 (2 layers, C = 16, H = 2, V = 11, T = 5, B = 2) composed from the backend's
// ops, forward and backward by hand as llm.c does, on one rank: every collective of the
// 4D plan (docs/parallel-plan.md) is marked where it goes and is the identity here. The
// analytic gradient of every parameter tensor is checked against central finite
// differences of the loss at sampled entries.
//
// This is also the reference for how the ops compose into a GPT-2 block:
//   x = wte[tokens] + wpe
//   per layer:  x = x + proj(attention(qkv(ln1(x))));  x = x + fcproj(gelu(fc(ln2(x))))
//   logits = ln_f(x) · wte^T (tied);  loss = mean cross-entropy
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/cpu/cpu_backend.hpp"

namespace axonn {
namespace {

using Floats = std::vector<float>;

struct TinyConfig {
  int64_t L = 2, C = 16, H = 2, V = 11, T = 5, B = 2;
  float eps = 1e-5f;  // LayerNorm
};

struct ParamTensor {
  std::string name;
  int64_t offset, size;
  int64_t rows;  // > 1 for the 2-D weights
};

// "h<l>.", the prefix of layer l's parameter names.
std::string layer_prefix(int64_t l) {
  std::string prefix = "h";
  prefix += std::to_string(l);
  prefix += '.';
  return prefix;
}

// All parameters in one flat buffer (and the gradients in another of the same layout).
std::vector<ParamTensor> param_layout(const TinyConfig& c) {
  std::vector<ParamTensor> t;
  int64_t offset = 0;
  auto add = [&](const std::string& name, int64_t rows, int64_t cols) {
    t.push_back({name, offset, rows * cols, rows});
    offset += rows * cols;
  };
  add("wte", c.V, c.C);  // (V, C), also the LM head
  add("wpe", c.T, c.C);  // (T, C)
  for (int64_t l = 0; l < c.L; ++l) {
    const std::string p = layer_prefix(l);
    add(p + "ln1.g", 1, c.C);
    add(p + "ln1.b", 1, c.C);
    add(p + "qkv.w", c.C, 3 * c.C);  // (C, 3C): columns q | k | v, heads of C/H inside each
    add(p + "qkv.b", 1, 3 * c.C);
    add(p + "proj.w", c.C, c.C);
    add(p + "proj.b", 1, c.C);
    add(p + "ln2.g", 1, c.C);
    add(p + "ln2.b", 1, c.C);
    add(p + "fc.w", c.C, 4 * c.C);
    add(p + "fc.b", 1, 4 * c.C);
    add(p + "fcproj.w", 4 * c.C, c.C);
    add(p + "fcproj.b", 1, c.C);
  }
  add("lnf.g", 1, c.C);
  add("lnf.b", 1, c.C);
  return t;
}

class TinyGpt {
 public:
  TinyGpt(Backend& be, const TinyConfig& cfg, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets)
      : be_(be), c_(cfg), m_(cfg.B * cfg.T), layout_(param_layout(cfg)), tokens_(be, tokens), targets_(be, targets) {
    const int64_t n_params = layout_.back().offset + layout_.back().size;
    params_ = DeviceBuffer<float>(be, static_cast<size_t>(n_params));
    grads_ = DeviceBuffer<float>(be, static_cast<size_t>(n_params));
    const int64_t m = m_, C = c_.C;
    for (int64_t l = 0; l < c_.L; ++l) layers_.push_back(LayerActs(be, cfg, m));
    res_final_ = buffer(m * C);
    lnf_mean_ = buffer(m);
    lnf_rstd_ = buffer(m);
    lnf_out_ = buffer(m * C);
    logits_ = buffer(m * c_.V);
    row_max_ = buffer(m);
    max_ = buffer(m);
    partials_ = buffer(2 * m);
    losses_ = buffer(m);
    tmp_ = buffer(m * C);
    dres_ = buffer(m * C);
    dtmp_ = buffer(m * C);
    datt_ = buffer(m * C);
    dqkv_ = buffer(m * 3 * C);
    d4c_ = buffer(m * 4 * C);
    ln_partials_ = buffer(2 * m);
  }

  const std::vector<ParamTensor>& layout() const { return layout_; }
  void set_params(const Floats& host) { params_.upload(host); }
  Floats grads() const { return grads_.download(); }

  // Forward; the mean loss over the B·T tokens, summed in double.
  double forward() {
    const int64_t m = m_, C = c_.C, V = c_.V, T = c_.T, B = c_.B;
    // Token embedding (vocab-parallel: [all-reduce over y]) plus positions.
    be_.embedding_forward(layers_[0].res.data(), tokens_.data(), p("wte"), m, C, 0, V);
    be_.position_forward(layers_[0].res.data(), p("wpe"), B, T, C);
    for (int64_t l = 0; l < c_.L; ++l) {
      LayerActs& a = layers_[l];
      const std::string h = layer_prefix(l);
      float* next = l + 1 < c_.L ? layers_[l + 1].res.data() : res_final_.data();
      layernorm(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), a.res.data(), p(h + "ln1.g"), p(h + "ln1.b"));
      linear(a.qkv.data(), a.ln1.data(), p(h + "qkv.w"), p(h + "qkv.b"), C, 3 * C);
      const float* qkv = a.qkv.data();
      be_.attention_forward(a.att.data(), a.lse.data(), qkv, qkv + C, qkv + 2 * C, 3 * C, B, T, c_.H, C / c_.H);
      linear(tmp_.data(), a.att.data(), p(h + "proj.w"), p(h + "proj.b"), C, C);
      be_.add(a.res2.data(), a.res.data(), tmp_.data(), m * C);  // residual
      layernorm(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p(h + "ln2.g"), p(h + "ln2.b"));
      linear(a.fc.data(), a.ln2.data(), p(h + "fc.w"), p(h + "fc.b"), C, 4 * C);
      be_.gelu_forward(a.fc_gelu.data(), a.fc.data(), m * 4 * C);
      linear(tmp_.data(), a.fc_gelu.data(), p(h + "fcproj.w"), p(h + "fcproj.b"), 4 * C, C);
      be_.add(next, a.res2.data(), tmp_.data(), m * C);  // residual
    }
    layernorm(lnf_out_.data(), lnf_mean_.data(), lnf_rstd_.data(), res_final_.data(), p("lnf.g"), p("lnf.b"));
    // Tied LM head: logits (m, V) = ln_f · wte^T  [role xy: all-reduce over x]
    be_.gemm(Transpose::no, Transpose::yes, m, V, C, 1.0f, lnf_out_.data(), C, p("wte"), C, 0.0f, logits_.data(), V);
    // Cross-entropy, exps written over the logits: [all-gather of row_max over y] ...
    be_.cross_entropy_row_max(row_max_.data(), logits_.data(), m, V);
    be_.cross_entropy_partials(partials_.data(), max_.data(), logits_.data(), row_max_.data(), 1, logits_.data(),
                               targets_.data(), m, V, 0);
    // ... [all-reduce of partials over y]
    be_.cross_entropy_loss(losses_.data(), partials_.data(), max_.data(), m);
    const Floats losses = losses_.download();
    double total = 0.0;
    for (float x : losses) total += x;
    return total / static_cast<double>(m);
  }

  // Backward of the last forward: grads = d(mean loss)/d(params).
  void backward() {
    const int64_t m = m_, C = c_.C, V = c_.V, T = c_.T, B = c_.B;
    be_.memset_zero(grads_.data(), grads_.bytes());
    // dlogits over the exps, in place; mean over the m tokens.
    be_.cross_entropy_backward(logits_.data(), logits_.data(), partials_.data(), targets_.data(), m, V, 0,
                               1.0f / static_cast<float>(m));
    // LM head, W = wte^T: dwte (V, C) += dlogits^T · ln_f;  dln_f (m, C) = dlogits · wte
    be_.gemm(Transpose::yes, Transpose::no, V, C, m, 1.0f, logits_.data(), V, lnf_out_.data(), C, 1.0f, g("wte"), C);
    be_.gemm(Transpose::no, Transpose::no, m, C, V, 1.0f, logits_.data(), V, p("wte"), C, 0.0f, dtmp_.data(), C);
    // dres: the gradient of the residual stream; LayerNorm backward accumulates into it.
    be_.memset_zero(dres_.data(), dres_.bytes());
    layernorm_backward(dres_.data(), g("lnf.g"), g("lnf.b"), dtmp_.data(), res_final_.data(), lnf_mean_.data(),
                       lnf_rstd_.data(), p("lnf.g"));
    for (int64_t l = c_.L - 1; l >= 0; --l) {
      LayerActs& a = layers_[l];
      const std::string h = layer_prefix(l);
      // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))); dres flows through unchanged, plus
      // the branch's gradient added by ln2's backward.
      linear_backward(d4c_.data(), g(h + "fcproj.w"), g(h + "fcproj.b"), dres_.data(), a.fc_gelu.data(),
                      p(h + "fcproj.w"), 4 * C, C);
      be_.gelu_backward(d4c_.data(), a.fc.data(), d4c_.data(), m * 4 * C);
      linear_backward(dtmp_.data(), g(h + "fc.w"), g(h + "fc.b"), d4c_.data(), a.ln2.data(), p(h + "fc.w"), C, 4 * C);
      layernorm_backward(dres_.data(), g(h + "ln2.g"), g(h + "ln2.b"), dtmp_.data(), a.res2.data(), a.ln2_mean.data(),
                         a.ln2_rstd.data(), p(h + "ln2.g"));
      // Attention: res2 = res + proj(attention(qkv(ln1(res)))).
      linear_backward(datt_.data(), g(h + "proj.w"), g(h + "proj.b"), dres_.data(), a.att.data(), p(h + "proj.w"), C,
                      C);
      const float* qkv = a.qkv.data();
      float* dqkv = dqkv_.data();
      be_.attention_backward(dqkv, dqkv + C, dqkv + 2 * C, datt_.data(), a.att.data(), a.lse.data(), qkv, qkv + C,
                             qkv + 2 * C, 3 * C, B, T, c_.H, C / c_.H);
      linear_backward(dtmp_.data(), g(h + "qkv.w"), g(h + "qkv.b"), dqkv, a.ln1.data(), p(h + "qkv.w"), C, 3 * C);
      layernorm_backward(dres_.data(), g(h + "ln1.g"), g(h + "ln1.b"), dtmp_.data(), a.res.data(), a.ln1_mean.data(),
                         a.ln1_rstd.data(), p(h + "ln1.g"));
    }
    // Embeddings: no collective (the wte gradient joins the head's before its reduce-scatter).
    be_.position_backward(g("wpe"), dres_.data(), B, T, C);
    be_.embedding_backward(g("wte"), dres_.data(), tokens_.data(), m, C, 0, V);
  }

 private:
  // Activations kept from forward to backward, per layer.
  struct LayerActs {
    LayerActs(Backend& be, const TinyConfig& c, int64_t m)
        : res(be, m * c.C),
          ln1_mean(be, m),
          ln1_rstd(be, m),
          ln1(be, m * c.C),
          qkv(be, m * 3 * c.C),
          lse(be, c.B * c.H * c.T),
          att(be, m * c.C),
          res2(be, m * c.C),
          ln2_mean(be, m),
          ln2_rstd(be, m),
          ln2(be, m * c.C),
          fc(be, m * 4 * c.C),
          fc_gelu(be, m * 4 * c.C) {}
    DeviceBuffer<float> res;                 // (m, C) the layer's input
    DeviceBuffer<float> ln1_mean, ln1_rstd;  // (m)
    DeviceBuffer<float> ln1;                 // (m, C)
    DeviceBuffer<float> qkv;                 // (m, 3C)
    DeviceBuffer<float> lse;                 // (B, H, T)
    DeviceBuffer<float> att;                 // (m, C) attention output before proj
    DeviceBuffer<float> res2;                // (m, C) residual after attention
    DeviceBuffer<float> ln2_mean, ln2_rstd;  // (m)
    DeviceBuffer<float> ln2;                 // (m, C)
    DeviceBuffer<float> fc, fc_gelu;         // (m, 4C)
  };

  DeviceBuffer<float> buffer(int64_t n) { return DeviceBuffer<float>(be_, static_cast<size_t>(n)); }
  const ParamTensor& tensor(const std::string& name) const {
    for (const ParamTensor& t : layout_)
      if (t.name == name) return t;
    throw std::runtime_error("no parameter " + name);
  }
  float* p(const std::string& name) { return params_.data() + tensor(name).offset; }
  float* g(const std::string& name) { return grads_.data() + tensor(name).offset; }

  // Over the full width C here; with G_x > 1 each stage runs on C/G_x columns and the
  // marked all-reduces make the rows whole.
  void layernorm(float* out, float* mean, float* rstd, const float* x, const float* gamma, const float* beta) {
    be_.layernorm_row_sums(mean, x, m_, c_.C);                            // [all-reduce over x]
    be_.layernorm_centered_squares(mean, rstd, mean, x, m_, c_.C, c_.C);  // [all-reduce over x]
    be_.layernorm_normalize(out, rstd, x, mean, rstd, gamma, beta, m_, c_.C, c_.C, c_.eps);
  }
  void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dout, const float* x, const float* mean,
                          const float* rstd, const float* gamma) {
    be_.layernorm_backward_partials(ln_partials_.data(), dout, x, mean, rstd, gamma, m_, c_.C);  // [all-reduce over x]
    be_.layernorm_backward_finish(dx, dgamma, dbeta, ln_partials_.data(), dout, x, mean, rstd, gamma, m_, c_.C, c_.C);
  }
  // y (m, n) = x (m, k) · w (k, n) + bias  [all-gather W over z; all-reduce y over the k-axis]
  void linear(float* y, const float* x, const float* w, const float* bias, int64_t k, int64_t n) {
    be_.gemm(Transpose::no, Transpose::no, m_, n, k, 1.0f, x, k, w, n, 0.0f, y, n);
    be_.bias_forward(y, bias, m_, n, n);
  }
  // dbias += Σ dy; dw += x^T·dy [reduce-scatter over z]; dx = dy·w^T [all-reduce over the n-axis]
  void linear_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x, const float* w, int64_t k,
                       int64_t n) {
    be_.bias_backward(dbias, dy, m_, n, n);
    be_.gemm(Transpose::yes, Transpose::no, k, n, m_, 1.0f, x, k, dy, n, 1.0f, dw, n);
    be_.gemm(Transpose::no, Transpose::yes, m_, k, n, 1.0f, dy, n, w, n, 0.0f, dx, k);
  }

  Backend& be_;
  TinyConfig c_;
  int64_t m_;
  std::vector<ParamTensor> layout_;
  DeviceBuffer<int32_t> tokens_, targets_;
  DeviceBuffer<float> params_, grads_;
  std::vector<LayerActs> layers_;
  DeviceBuffer<float> res_final_, lnf_mean_, lnf_rstd_, lnf_out_, logits_, row_max_, max_, partials_, losses_, tmp_;
  DeviceBuffer<float> dres_, dtmp_, datt_, dqkv_, d4c_, ln_partials_;
};

TEST(TrainerGradcheck, TinyGpt2GradientsMatchCentralFiniteDifferences) {
  const TinyConfig cfg;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.V) - 1);
  std::vector<int32_t> tokens(cfg.B * cfg.T), targets(cfg.B * cfg.T);
  for (auto& t : tokens) t = token(rng);
  for (auto& t : targets) t = token(rng);

  auto be = make_cpu_backend();
  TinyGpt model(*be, cfg, tokens, targets);
  // Weights larger than GPT-2's 0.02 so that every path carries a gradient well above the
  // finite differences' noise; LayerNorm gains near 1.
  Floats params;
  std::uniform_real_distribution<float> w(-0.5f, 0.5f), gain(0.8f, 1.2f), small(-0.1f, 0.1f);
  for (const ParamTensor& t : model.layout()) {
    const bool is_gain = t.name.ends_with(".g");
    const bool is_bias = t.rows == 1 && !is_gain;
    for (int64_t i = 0; i < t.size; ++i) params.push_back(is_gain ? gain(rng) : is_bias ? small(rng) : w(rng));
  }
  model.set_params(params);
  const double loss = model.forward();
  model.backward();
  const Floats grads = model.grads();
  EXPECT_GT(loss, 1.0);  // about log(11) = 2.4 for an untrained model
  EXPECT_LT(loss, 5.0);

  // Central differences on the float32 model. Two errors of their own: rounding of the loss
  // (~2.4, one ulp 2.4e-7) over 2ε gives steps of 1.2e-5; truncation ~ε²·f'''/6 was measured
  // at <= 8e-4 of the gradient (1.8e-4 at a gradient of 0.28) with ε = 1e-2. The tolerance
  // 3e-5 + 3e-3·|numeric| has ~3x headroom over both, while a wrong or missing term of the
  // backward is off by a good part of the gradient (typical entries 1e-3 to 0.3).
  const float eps = 1e-2f;
  int checked = 0;
  for (const ParamTensor& t : model.layout()) {
    SCOPED_TRACE(t.name);
    std::vector<int64_t> entries;
    for (int64_t i = 0; i < std::min<int64_t>(t.size, 6); ++i)
      entries.push_back(std::uniform_int_distribution<int64_t>(0, t.size - 1)(rng));
    double max_grad = 0.0;
    for (int64_t i = 0; i < t.size; ++i)
      max_grad = std::max(max_grad, std::fabs(static_cast<double>(grads[t.offset + i])));
    EXPECT_GT(max_grad, 1e-4) << "a parameter tensor with no gradient: the check would prove nothing";
    for (int64_t i : entries) {
      Floats perturbed = params;
      perturbed[t.offset + i] = params[t.offset + i] + eps;
      model.set_params(perturbed);
      const double up = model.forward();
      perturbed[t.offset + i] = params[t.offset + i] - eps;
      model.set_params(perturbed);
      const double down = model.forward();
      const double numeric = (up - down) / (2.0 * static_cast<double>(eps));
      const double analytic = grads[t.offset + i];
      EXPECT_NEAR(analytic, numeric, 3e-5 + 3e-3 * std::fabs(numeric)) << t.name << "[" << i << "]";
      ++checked;
    }
  }
  model.set_params(params);
  EXPECT_EQ(model.forward(), loss) << "the forward is deterministic";
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace axonn
