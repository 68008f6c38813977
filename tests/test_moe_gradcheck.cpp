// A whole MoE block's MLP (trainer/model/moe_layer.hpp, docs/moe.md) against central finite
// differences: the float32 router, top-k, routing plan, experts (GELU MLPs with biases),
// combine and the balance loss, as the trainer builds them (ParameterStore, MoeLayer), on the
// CPU backend at one rank, where every collective is the identity.
//
// The scalar differentiated is what MoeLayer::backward computes the gradient of:
//   L = Σ out ⊙ R + m·loss_scale · balance_loss
// out [m, C] the layer's output, R [m, C] a fixed tensor passed as dout, balance_loss the
// layer's own value (statistics(), w·E·Σ_i f_i·P_i). The backward scales the balance loss's
// gradient at each token's probabilities by loss_scale times the micro-batch's tokens
// (reduce_statistics' coef), and treats f_i (a count of routed pairs) as constant, as
// Switch does. Perturbations here never change a top-k choice (the routing is checked at
// every perturbed input), so f_i, the routing plan and the dropped set are fixed and L is
// smooth in every coordinate.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "comm/comm_grid.hpp"
#include "layout/model_plan.hpp"
#include "thread_exchange.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/model/grad_scatter.hpp"
#include "trainer/model/moe_layer.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/model/routing_plan.hpp"

namespace axonn {
namespace {

using Floats = std::vector<float>;

// C = 8, E = 4 experts of hidden 4C = 32; two sequences of T = 8 tokens: m = 16.
constexpr int kHidden = 8, kExperts = 4, kSequence = 8, kMicroBatch = 2;
constexpr int64_t kTokens = int64_t{kMicroBatch} * kSequence;

struct MoeCase {
  const char* name;
  int top_k;
  // 0: dropless. 0.5: ⌈0.5·T·k/E⌉ = k rows per expert and sequence, half the T·k pairs at
  // most, so tokens are dropped (with k = 2 some lose one of their two choices, some both).
  double capacity_factor;
};

// gtest names a failing case by this, not by the struct's bytes.
void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

ModelShape tiny_moe(const MoeCase& c) {
  ModelShape model;
  model.layers = 1;
  model.hidden = kHidden;
  model.heads = 2;
  model.vocab = 16;
  model.sequence = kSequence;
  model.experts = kExperts;
  model.top_k = c.top_k;
  model.moe_every = 1;  // block 0 is an MoE block
  model.capacity_factor = c.capacity_factor;
  // Large enough that the balance loss's gradient at the router is comparable to the
  // combine's (GPT-2 defaults use 0.01).
  model.aux_loss_weight = 0.5;
  return model;
}

// Each token's top k experts (m, k), from the logits x [m, C] · w [C, E] in double (the
// softmax keeps their order; ties to the lower index as router_top_k), and the smallest gap
// between consecutive logits among each token's k + 1 largest: a gap > 0 down to the
// (k+1)-th means the choices and their order are what the float32 router picks too, whose
// logits are within ~1e-6 of these.
struct HostRouting {
  std::vector<int32_t> choices;
  double margin = INFINITY;
};

HostRouting host_routing(const float* x, const float* w, int64_t m, int64_t c, int64_t E, int64_t k) {
  HostRouting r;
  std::vector<double> logits(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < m; ++t) {
    std::fill(logits.begin(), logits.end(), 0.0);
    for (int64_t j = 0; j < c; ++j)
      for (int64_t e = 0; e < E; ++e)
        logits[static_cast<size_t>(e)] += static_cast<double>(x[t * c + j]) * w[j * E + e];
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    for (int64_t s = 0; s < k; ++s) {
      r.choices.push_back(order[static_cast<size_t>(s)]);
      r.margin = std::min(r.margin, logits[static_cast<size_t>(order[static_cast<size_t>(s)])] -
                                        logits[static_cast<size_t>(order[static_cast<size_t>(s + 1)])]);
    }
  }
  return r;
}

std::string entry_name(const std::string& tensor, int64_t i) {
  std::string s = tensor;
  s += '[';
  s += std::to_string(i);
  s += ']';
  return s;
}

class MoeLayerGradcheck : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeLayerGradcheck, GradientsMatchCentralFiniteDifferences) {
  const MoeCase& mc = GetParam();
  const ModelShape model = tiny_moe(mc);
  const int64_t m = kTokens, C = kHidden, E = kExperts, k = mc.top_k;
  test::run_ranks(1, [&](int, Exchange& exchange) {
    CpuBackend backend(1);
    CommGrid grid(exchange, Layout{}, std::chrono::seconds(5), true);
    ParameterStore params(backend, model, Layout{}, grid.coords());
    params.initialize(3);
    const ParameterLayout& layout = params.layout();
    Floats host(static_cast<size_t>(params.size()));
    backend.copy_to_host(host.data(), params.params(), host.size() * sizeof(float));

    // The MoE block's tensors, in this rank's (the whole model's) flat buffer: router [C, E],
    // experts.fc.weight [E, C, 4C], experts.fc.bias [E, 4C], experts.proj.weight [E, 4C, C],
    // experts.proj.bias [E, C].
    const std::string p = "h.0.mlp.";
    const std::string router = p + "router.weight", fc = p + "experts.fc.weight", fc_bias = p + "experts.fc.bias",
                      proj = p + "experts.proj.weight", proj_bias = p + "experts.proj.bias";
    // Weights far larger than GPT-2's init (std 0.02), so that every path carries a gradient
    // well above the finite differences' noise: fc and proj outputs of order 0.5, router
    // logits of order 1 (probabilities well away from 0 and 1).
    std::mt19937 rng(static_cast<std::mt19937::result_type>(17 + 2 * mc.top_k + (mc.capacity_factor > 0 ? 1 : 0)));
    auto fill = [&](const std::string& name, float bound) {
      std::uniform_real_distribution<float> u(-bound, bound);
      const ParamSlot& s = layout.slot(name);
      for (int64_t i = 0; i < s.count; ++i) host[static_cast<size_t>(s.offset + i)] = u(rng);
    };
    fill(router, 1.0f);
    fill(fc, 0.5f);
    fill(fc_bias, 0.2f);
    fill(proj, 0.3f);
    fill(proj_bias, 0.2f);
    const float* w_router = host.data() + layout.slot(router).offset;

    // The input x [m, C] (a LayerNorm's output in the model): each token's row drawn until its
    // k + 1 largest logits are >= 0.1 apart. A perturbation by ε = 1e-2 moves a logit by at
    // most ε·max|w| = 1e-2 (of x) or ε·max|x| = 1e-2 (of w), a gap by at most 2e-2, so no
    // choice changes; checked at every perturbed point all the same.
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    Floats x(static_cast<size_t>(m * C));
    for (int64_t t = 0; t < m; ++t) {
      float* row = x.data() + t * C;
      do {
        for (int64_t j = 0; j < C; ++j) row[j] = unit(rng);
      } while (host_routing(row, w_router, 1, C, E, k).margin < 0.1);
    }
    Floats r(static_cast<size_t>(m * C));
    for (float& v : r) v = unit(rng);
    const HostRouting routing = host_routing(x.data(), w_router, m, C, E, k);
    const RoutingPlan plan = plan_routing(routing.choices, k, E, kSequence, expert_capacity_per_sequence(model));

    params.set_params(host.data());
    MoeLayer layer(backend, grid, model, 0, kMicroBatch, params, params.weights() + layout.slot(fc).offset,
                   params.weights() + layout.slot(proj).offset);
    DeviceBuffer<float> in(backend, x), out(backend, static_cast<size_t>(m * C)), dout(backend, r),
        d_in(backend, static_cast<size_t>(m * C));
    GradScatter scatter;  // G_z = 1: never used
    // The step has two micro-batches of m tokens: the balance loss enters L at m·loss_scale = 1/2.
    const float loss_scale = 0.5f / static_cast<float>(m);
    const double balance_share = static_cast<double>(m) * static_cast<double>(loss_scale);

    // L at the current x and parameters (uploaded first), in double from the float32 output.
    auto loss = [&](const Floats& weights) {
      in.upload(x);
      params.set_params(host.data());
      layer.reset_statistics();
      layer.forward(in.data(), out.data(), loss_scale);
      const Floats o = out.download();
      double sum = 0.0;
      for (size_t i = 0; i < o.size(); ++i) sum += static_cast<double>(o[i]) * weights[i];
      return sum + balance_share * layer.statistics().balance_loss;
    };

    // The routing the layer saw: its dropped pairs are the host plan's, and a token with
    // no kept pair gets an output row of zeros (it reaches the residual stream only).
    const double base = loss(r);
    EXPECT_EQ(layer.statistics().routed_pairs, static_cast<double>(m * k));
    EXPECT_EQ(layer.statistics().dropped_pairs, static_cast<double>(plan.dropped));
    EXPECT_GT(layer.statistics().balance_loss, 0.0);
    {
      const Floats o = out.download();
      int64_t all_dropped = 0, partly_dropped = 0;
      for (int64_t t = 0; t < m; ++t) {
        int64_t kept = 0;
        for (int64_t s = 0; s < k; ++s) kept += plan.slots[static_cast<size_t>(t * k + s)] >= 0 ? 1 : 0;
        all_dropped += kept == 0 ? 1 : 0;
        partly_dropped += kept > 0 && kept < k ? 1 : 0;
        for (int64_t j = 0; j < C; ++j)
          if (kept == 0) {
            EXPECT_EQ(o[static_cast<size_t>(t * C + j)], 0.0f) << "dropped token " << t;
          }
      }
      if (mc.capacity_factor > 0) {
        EXPECT_GT(all_dropped, 0) << "the capacity should drop some token entirely";
        EXPECT_LT(all_dropped, m);
        if (k == 2) {
          EXPECT_GT(partly_dropped, 0) << "some token should keep one of its two choices";
        }
      } else {
        EXPECT_EQ(plan.dropped, 0);
      }
    }

    // Two passes: dout = R (the combine's path and the balance loss's), then dout = 0, where
    // L is the balance loss alone and the gradients at x and the router are its own (the
    // experts' exactly zero): they are 1e-3 to 1e-2, far below the combine's (up to ~1), so a
    // wrong balance-loss gradient could hide under the first pass's tolerance, not the second's.
    //
    // ε = 1e-2 as in tests/test_trainer_gradcheck.cpp. Two errors of the central difference:
    // rounding of L through the float32 outputs it sums (a perturbation moves up to ~64 of
    // them, each ~0.5 rounded to ~3e-8: ~1e-5 over 2ε with dout = R; the balance loss alone,
    // ~0.3 from float32 probability sums, ~1e-6), and the truncation ε²·f'''/6, measured at
    // <= 1e-3 of the gradient (the fc weights, through the GELU's curvature). Largest errors
    // measured: 2.1e-5 with dout = R, 1.4e-6 for the balance loss alone. Tolerances
    // abs + 3e-3·|numeric|, abs = 1e-4 and 5e-6: >= 3x headroom over both, while a wrong or
    // missing term is off by a good part of a gradient.
    const float eps = 1e-2f;
    const double rel_tol = 3e-3;
    for (const bool balance_only : {false, true}) {
      SCOPED_TRACE(balance_only ? "dout = 0: the balance loss alone" : "dout = R");
      const double abs_tol = balance_only ? 5e-6 : 1e-4;
      // The largest entry of each checked tensor is at least this (measured: 0.3 to 2.9 with
      // dout = R, 1.5e-3 to 9e-3 for the balance loss alone).
      const double least_gradient = balance_only ? 1e-3 : 1e-2;
      const Floats weights = balance_only ? Floats(r.size(), 0.0f) : r;
      dout.upload(weights);
      const double at_base = loss(weights);
      if (!balance_only) {
        EXPECT_EQ(at_base, base) << "the forward is deterministic";
      }
      params.zero_grads();
      layer.backward(dout.data(), in.data(), d_in.data(), scatter);
      const Floats dx = d_in.download();
      Floats grads(static_cast<size_t>(params.size()));
      backend.copy_to_host(grads.data(), params.grads(), grads.size() * sizeof(float));

      double worst = 0.0, worst_abs = 0.0;  // the largest |analytic - numeric| / tolerance, and unscaled
      std::string worst_at;
      int checked = 0;
      // Every entry of values [n] (x or a slice of host) against analytic [n].
      auto check = [&](const std::string& name, float* values, const float* analytic, int64_t n, bool moves_router) {
        double largest = 0.0;
        for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::fabs(static_cast<double>(analytic[i])));
        const bool expert_tensor = !moves_router;
        if (balance_only && expert_tensor) {
          // The balance loss does not read the experts.
          EXPECT_EQ(largest, 0.0) << name << " has a gradient from the balance loss alone";
          return;
        }
        EXPECT_GT(largest, least_gradient) << name << " has no gradient: the check would prove nothing";
        for (int64_t i = 0; i < n; ++i) {
          const float saved = values[i];
          auto at = [&](float delta) {
            values[i] = saved + delta;
            if (moves_router) {
              const HostRouting moved = host_routing(x.data(), w_router, m, C, E, k);
              EXPECT_EQ(moved.choices, routing.choices) << entry_name(name, i) << ": the routing changed";
              EXPECT_GT(moved.margin, 0.05) << entry_name(name, i);
            }
            const double l = loss(weights);
            values[i] = saved;
            return l;
          };
          const double numeric = (at(eps) - at(-eps)) / (2.0 * static_cast<double>(eps));
          const double tol = abs_tol + rel_tol * std::fabs(numeric);
          EXPECT_NEAR(analytic[i], numeric, tol) << entry_name(name, i);
          const double error = std::fabs(static_cast<double>(analytic[i]) - numeric);
          worst_abs = std::max(worst_abs, error);
          if (const double ratio = error / tol; ratio > worst) {
            worst = ratio;
            worst_at = entry_name(name, i);
          }
          ++checked;
        }
      };
      check("x", x.data(), dx.data(), m * C, true);
      for (const std::string& name : {router, fc, fc_bias, proj, proj_bias}) {
        const ParamSlot& s = layout.slot(name);
        check(name, host.data() + s.offset, grads.data() + s.offset, s.count, name == router);
      }
      EXPECT_EQ(loss(weights), at_base) << "the forward is deterministic";
      std::printf(
          "[ measured ] %s, %s: %d entries, largest |analytic - numeric| %.2e; the worst %.2f of its tolerance (%s)\n",
          mc.name, balance_only ? "balance loss alone" : "dout = R", checked, worst_abs, worst, worst_at.c_str());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Routing, MoeLayerGradcheck,
                         ::testing::Values(MoeCase{"top1_dropless", 1, 0.0}, MoeCase{"top2_dropless", 2, 0.0},
                                           MoeCase{"top1_capacity", 1, 0.5}, MoeCase{"top2_capacity", 2, 0.5}),
                         [](const ::testing::TestParamInfo<MoeCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

}  // namespace
}  // namespace axonn
