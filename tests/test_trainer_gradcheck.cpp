// Also a mixture-of-experts router with its dispatch and combine (the last test): the
// gradients from the backend's backward ops against central finite differences.
//
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
#include <functional>
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
      be_.attention_forward(a.att.data(), a.lse.data(), qkv, qkv + C, qkv + 2 * C, 3 * C, B, T, c_.H, c_.H, C / c_.H,
                            C / c_.H);
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
                             qkv + 2 * C, 3 * C, B, T, c_.H, c_.H, C / c_.H, C / c_.H);
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


// A mixture-of-experts layer around fixed experts, on one rank (its all-reduces over x are
// the identity): the router picks k of E experts per token, dispatch gathers each token's
// row into its slots (grouped by expert), an "expert" adds a fixed row `in` to it, and
// combine adds the slots back weighted by the gates:
//   logits = x·w;  probs, experts, gates = top_k(softmax(logits))
//   h (n, c) = dispatch(x) + in;  out (m, c) = Σ_s gate_s·h[slot_s]
//   loss = Σ wl ⊙ out + Σ_rows coef·probs   (coef: a balance loss's d/dprobs)
// so the gradients reach x through both the router and dispatch, w through the router and
// in through combine: every backward op of the section.
class MoeLayer {
 public:
  MoeLayer(Backend& be, int64_t m, int64_t c, int64_t E, int64_t k, const Floats& wl, const Floats& coef)
      : be_(be), m_(m), c_(c), E_(E), k_(k), n_(m * k), wl_(wl), coef_(be, coef) {}

  // The loss at (x, w, in), in double. The first call fixes the routing plan from its top k;
  // later calls expect the same choices.
  double forward(const Floats& x, const Floats& w, const Floats& in) {
    x_ = DeviceBuffer<float>(be_, x);
    w_ = DeviceBuffer<float>(be_, w);
    in_ = DeviceBuffer<float>(be_, in);
    probs_ = DeviceBuffer<float>(be_, static_cast<size_t>(m_ * E_));
    gates_ = DeviceBuffer<float>(be_, static_cast<size_t>(n_));
    experts_ = DeviceBuffer<int32_t>(be_, static_cast<size_t>(n_));
    be_.router_logits(probs_.data(), x_.data(), w_.data(), m_, c_, E_);
    be_.router_top_k(probs_.data(), experts_.data(), gates_.data(), probs_.data(), m_, E_, k_);  // in place
    const std::vector<int32_t> experts = experts_.download();
    if (plan_.empty()) plan(experts);
    EXPECT_EQ(experts, plan_) << "a perturbation changed the routing: the margins are too small";
    h_ = DeviceBuffer<float>(be_, static_cast<size_t>(n_ * c_));
    be_.gather_rows(h_.data(), x_.data(), rows_.data(), nullptr, n_, m_, c_);
    be_.add(h_.data(), h_.data(), in_.data(), n_ * c_);
    DeviceBuffer<float> out(be_, Floats(static_cast<size_t>(m_ * c_), 0.0f));
    be_.combine_rows(out.data(), h_.data(), slots_.data(), gates_.data(), m_, k_, n_, c_);
    const Floats o = out.download(), p = probs_.download(), coef = coef_.download();
    double loss = 0.0;
    for (size_t i = 0; i < o.size(); ++i) loss += static_cast<double>(wl_[i]) * o[i];
    for (size_t i = 0; i < p.size(); ++i) loss += static_cast<double>(coef[i % coef.size()]) * p[i];
    return loss;
  }

  // dx, dw, din of the last forward's loss, by the backend's backward ops.
  void backward(Floats& dx, Floats& dw, Floats& din) {
    DeviceBuffer<float> dout(be_, wl_);
    DeviceBuffer<float> dh(be_, static_cast<size_t>(n_ * c_)), dgates(be_, static_cast<size_t>(n_));
    DeviceBuffer<float> dlogits(be_, static_cast<size_t>(m_ * E_));
    DeviceBuffer<float> ddx(be_, Floats(static_cast<size_t>(m_ * c_), 0.0f));
    DeviceBuffer<float> ddw(be_, Floats(static_cast<size_t>(c_ * E_), 0.0f));
    // Combine's backward to h is a gather of dout rows scaled by each slot's gate.
    const Floats gates = gates_.download();
    Floats slot_gates(static_cast<size_t>(n_));
    for (int64_t p = 0; p < n_; ++p) slot_gates[static_cast<size_t>(slots_host_[p])] = gates[p];
    DeviceBuffer<float> dslot_gates(be_, slot_gates);
    be_.gather_rows(dh.data(), dout.data(), rows_.data(), dslot_gates.data(), n_, m_, c_);  // dh = din
    be_.combine_gates_grad(dgates.data(), dout.data(), h_.data(), slots_.data(), m_, k_, n_, c_);
    be_.router_logits_grad(dlogits.data(), probs_.data(), experts_.data(), dgates.data(), coef_.data(), m_, E_, k_);
    be_.combine_rows(ddx.data(), dh.data(), slots_.data(), nullptr, m_, k_, n_, c_);  // dispatch's backward
    be_.router_backward(ddx.data(), ddw.data(), dlogits.data(), x_.data(), w_.data(), m_, c_, E_);
    dx = ddx.download();
    dw = ddw.download();
    din = dh.download();
  }

 private:
  // The routing plan of experts (m, k), as the host makes it: slots grouped by expert,
  // tokens in order inside each; rows (n) = the token of each slot.
  void plan(const std::vector<int32_t>& experts) {
    plan_ = experts;
    std::vector<int32_t> rows;
    slots_host_.assign(static_cast<size_t>(n_), -1);
    for (int64_t e = 0; e < E_; ++e)
      for (int64_t p = 0; p < n_; ++p)
        if (experts[p] == e) {
          slots_host_[p] = static_cast<int32_t>(rows.size());
          rows.push_back(static_cast<int32_t>(p / k_));
        }
    rows_ = DeviceBuffer<int32_t>(be_, rows);
    slots_ = DeviceBuffer<int32_t>(be_, slots_host_);
  }

  Backend& be_;
  int64_t m_, c_, E_, k_, n_;
  Floats wl_;
  DeviceBuffer<float> coef_;
  std::vector<int32_t> plan_, slots_host_;
  DeviceBuffer<int32_t> rows_, slots_, experts_;
  DeviceBuffer<float> x_, w_, in_, probs_, gates_, h_;
};

// Each row's logits, in descending order, are at least `margin` apart down to the (k+1)-th,
// so perturbations that move every gap by less than the margin keep the top k and its order.
bool clear_margins(const Floats& x, const Floats& w, int64_t m, int64_t c, int64_t E, int64_t k, double margin) {
  for (int64_t t = 0; t < m; ++t) {
    std::vector<double> l(static_cast<size_t>(E), 0.0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t j = 0; j < c; ++j) l[e] += static_cast<double>(x[t * c + j]) * w[j * E + e];
    std::sort(l.begin(), l.end(), std::greater<>());
    for (int64_t s = 0; s < k && s + 1 < E; ++s)
      if (l[s] - l[s + 1] < margin) return false;
  }
  return true;
}

TEST(TrainerGradcheck, MixtureOfExpertsRouterDispatchAndCombineMatchCentralFiniteDifferences) {
  const int64_t m = 6, c = 8, E = 4;
  auto be = make_cpu_backend();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto draw = [&](int64_t n) {
    Floats v(static_cast<size_t>(n));
    for (float& f : v) f = uniform(rng);
    return v;
  };
  // ε = 1e-2 moves a logit by at most ε·max|x or w| <= 1e-2 and a gap by twice that: a
  // margin of 0.1 keeps every routing decision. The loss (a sum of ~100 terms of ~0.3) is
  // rounded to ~1e-6, so the differences carry ~1e-4 of noise at worst; the truncation
  // ε²·f'''/6 of these smooth terms is ~1e-5·|f'''|. Tolerance 3e-4 + 3e-3·|numeric|; a
  // missing or wrong term is off by a good part of the gradient (entries 1e-2 to 1).
  const float eps = 1e-2f;
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    Floats x, w;
    do {
      x = draw(m * c);
      w = draw(c * E);
    } while (!clear_margins(x, w, m, c, E, k, 0.1));
    Floats in = draw(m * k * c);
    const Floats wl = draw(m * c), coef = draw(E);
    MoeLayer layer(*be, m, c, E, k, wl, coef);
    const double loss = layer.forward(x, w, in);
    Floats dx, dw, din;
    layer.backward(dx, dw, din);

    // Every entry of `values` (x, w or in, which forward reads), perturbed by ±ε.
    auto check = [&](const char* name, Floats& values, const Floats& analytic) {
      ASSERT_EQ(values.size(), analytic.size()) << name;
      double max_grad = 0.0;
      for (float g : analytic) max_grad = std::max(max_grad, std::fabs(static_cast<double>(g)));
      EXPECT_GT(max_grad, 1e-2) << name << " has no gradient: the check would prove nothing";
      for (size_t i = 0; i < values.size(); ++i) {
        const float saved = values[i];
        values[i] = saved + eps;
        const double up = layer.forward(x, w, in);
        values[i] = saved - eps;
        const double down = layer.forward(x, w, in);
        values[i] = saved;
        const double numeric = (up - down) / (2.0 * static_cast<double>(eps));
        EXPECT_NEAR(analytic[i], numeric, 3e-4 + 3e-3 * std::fabs(numeric)) << name << "[" << i << "]";
      }
    };
    check("x", x, dx);
    check("w", w, dw);
    check("in", in, din);
    EXPECT_EQ(layer.forward(x, w, in), loss) << "the forward is deterministic";
  }
}

}  // namespace
}  // namespace axonn
