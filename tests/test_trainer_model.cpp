// The 4D-parallel GPT (trainer/model) on ranks that are threads of this process, over the
// real Gloo communicators: the parameter table tiles every tensor, init does not depend on
// the layout, the single-rank gradient matches finite differences, and for many layouts one
// step's loss and synchronized gradients equal the serial run's.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "comm/comm_grid.hpp"
#include "layout/layout_volume.hpp"
#include "layout/model_plan.hpp"
#include "model_step.hpp"
#include "thread_exchange.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/init.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/optim/optimizer.hpp"

namespace axonn {
namespace {

using test::expect_same_bits;
using test::global_index;
using test::run_ranks;
using test::run_step;
using test::StepResult;
using test::token_at;

ModelShape tiny_model() { return ModelShape{.layers = 2, .hidden = 16, .heads = 4, .vocab = 32, .sequence = 8}; }

TEST(TrainerParameters, ShardsTileEveryTensorOncePerReplica) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x1", "2x2x1x2", "1x2x2x2", "1x1x2x2:zyxd", "1x2x1x4", "3x1x1x1"}) {
    const Layout layout = parse_layout(text);
    for (const auto& spec : gpt_parameters(model)) {
      std::map<std::vector<int64_t>, int> copies;  // rect offset -> ranks holding it
      int64_t distinct_elements = 0;
      for (int r = 0; r < layout.world(); ++r) {
        const Rect rect = shard_rect(spec, layout, layout.coords(r));
        if (copies[rect.offset]++ == 0) distinct_elements += element_count(rect);
      }
      int replicas = 1;
      for (Axis a : replica_axes(spec)) replicas *= layout.size(a);
      EXPECT_EQ(distinct_elements, element_count(spec.shape)) << text << " " << spec.name;
      for (const auto& [offset, n] : copies) EXPECT_EQ(n, replicas) << text << " " << spec.name;
    }
  }
}

TEST(TrainerParameters, CountsAndOrderMatchTheLayoutModel) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x1", "2x2x1x2", "1x2x2x2", "1x1x1x4"}) {
    const Layout layout = parse_layout(text);
    const ParameterLayout pl = parameter_layout(model, layout, layout.coords(layout.world() - 1));
    const ParameterCount predicted = parameters_per_rank(model, layout);
    EXPECT_EQ(pl.sharded, predicted.big) << text;
    EXPECT_EQ(pl.small(), predicted.small) << text;
    // Decayed tensors form one prefix that contains every sharded one.
    EXPECT_GE(pl.decayed, pl.sharded);
    for (const auto& s : pl.slots) EXPECT_EQ(s.spec.decay, s.offset < pl.decayed) << s.spec.name;
  }
  EXPECT_THROW(shard_rect(gpt_parameters(model)[0], parse_layout("1x3x1x1"), Coords{}), LayoutError);
}

TEST(TrainerParameters, InitOfAShardEqualsTheFullTensorThere) {
  const ModelShape model = tiny_model();
  const Layout layout = parse_layout("1x2x2x2");
  for (const auto& spec : gpt_parameters(model)) {
    std::vector<float> full(static_cast<size_t>(element_count(spec.shape)));
    init_shard(spec, full_rect(spec.shape), 7, full.data());
    for (int r = 0; r < layout.world(); ++r) {
      const Rect rect = shard_rect(spec, layout, layout.coords(r));
      std::vector<float> shard(static_cast<size_t>(element_count(rect)));
      init_shard(spec, rect, 7, shard.data());
      for (int64_t i = 0; i < element_count(rect); ++i)
        ASSERT_EQ(shard[static_cast<size_t>(i)], full[static_cast<size_t>(global_index(spec.shape, rect, i))])
            << spec.name << " rank " << r << " element " << i;
    }
    if (spec.init == ParamInit::normal) {
      double sq = 0;
      for (float v : full) sq += double{v} * v;
      const double std = std::sqrt(sq / static_cast<double>(full.size()));
      EXPECT_NEAR(std, spec.init_std, 0.35 * spec.init_std) << spec.name;  // few elements: loose
      std::vector<float> other(full.size());
      init_shard(spec, full_rect(spec.shape), 8, other.data());
      EXPECT_NE(other, full) << spec.name << ": the seed must change the weights";
    }
  }
}

TEST(TrainerModel, EveryLayoutGivesTheSerialLossAndGradients) {
  const ModelShape model = tiny_model();
  const int global_batch = 8, micro_batch = 2;
  const StepResult serial = run_step(model, Layout{}, global_batch, micro_batch);
  EXPECT_GT(serial.loss, 2.5);  // about log(32) = 3.47 untrained
  EXPECT_LT(serial.loss, 4.5);
  for (const char* text : {"2x1x1x1", "1x2x1x1", "1x1x2x1", "1x1x1x2", "1x2x2x1", "2x1x1x2", "1x1x2x2:zyxd", "4x1x1x1",
                           "2x2x1x2", "1x2x2x2", "2x2x2x1", "1x2x1x4", "1x4x1x2:yxzd"}) {
    const Layout layout = parse_layout(text);
    const StepResult r = run_step(model, layout, global_batch, micro_batch);
    // float32 sums in another order: a few ulps of the loss (~3.5, ulp 2.4e-7).
    EXPECT_NEAR(r.loss, serial.loss, 2e-6) << text;
    EXPECT_NEAR(r.grad_norm, serial.grad_norm, 1e-5 * serial.grad_norm) << text;
    for (const auto& [name, want] : serial.grads) {
      const auto& got = r.grads.at(name);
      float scale = 0;
      for (float v : want) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5f * scale + 1e-9f) << text << " " << name << "[" << i << "]";
    }
  }
}

// Overlap moves the z all-gathers and the data all-reduce beside compute; the same
// collectives run in the same order, so every layout gives the same bits with it on, and
// the counted bytes and calls (checked in run_step) stay the model's.
TEST(TrainerModel, OverlappedCollectivesGiveTheSameBits) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x2", "1x1x2x2:zyxd", "2x1x1x2", "4x1x1x1", "2x2x1x2", "1x2x1x4", "2x1x2x1"}) {
    const Layout layout = parse_layout(text);
    const StepResult blocking = run_step(model, layout, 8, 1, false);
    const StepResult overlapped = run_step(model, layout, 8, 1, true);
    EXPECT_EQ(overlapped.loss, blocking.loss) << text;
    EXPECT_EQ(overlapped.grad_norm, blocking.grad_norm) << text;
    for (const auto& [name, want] : blocking.grads) {
      const auto& got = overlapped.grads.at(name);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << text << " " << name << "[" << i << "]: " << got[i] << " vs " << want[i];
    }
  }
}

// Recomputation reruns the forward's ops on the inputs the forward had: every mode gives the
// bits of the run that keeps everything, with overlap off and on, and each rank counts the
// layout model's bytes at its mode, the rerun collectives included (run_step checks them).
// Three layers, so under block recomputation with overlap blocks 0 and 2 take turns on one
// set of gathered weights, which block 0's rerun must gather again.
class TrainerRecompute : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainerRecompute, EveryModeGivesTheBitsOfNoRecomputation) {
  ModelShape model = tiny_model();
  model.layers = 3;
  const Layout layout = parse_layout(GetParam());
  const StepResult kept = run_step(model, layout, 8, 2, false);
  for (Recompute mode : {Recompute::attention, Recompute::block})
    for (bool overlap : {false, true}) {
      const std::string what =
          std::string(GetParam()) + " recompute " + recompute_name(mode) + (overlap ? ", overlap on" : ", overlap off");
      SCOPED_TRACE(what);
      test::RankSetup setup;
      setup.recompute = mode;
      expect_same_bits(run_step(model, layout, 8, 2, overlap, setup), kept, what);
    }
}

// Layouts of 1, 2, 4 and 8 ranks with every axis split somewhere, z > 1 (gathered weights)
// in most.
INSTANTIATE_TEST_SUITE_P(Layouts, TrainerRecompute,
                         ::testing::Values("1x1x1x1", "2x1x1x1", "1x2x1x1", "1x1x2x1", "1x1x1x2", "1x2x1x2", "2x1x2x1",
                                           "1x1x2x2:zyxd", "2x2x1x2", "1x2x2x2", "1x2x1x4"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             if (c == ':') c = '_';
                           return name;
                         });

TEST(TrainerModel, SingleRankGradientMatchesFiniteDifferences) {
  ModelShape model = tiny_model();
  model.vocab = 11;  // any size works on one rank
  const int mb = 2;
  const int64_t m = mb * model.sequence;
  run_ranks(1, [&](int, Exchange& exchange) {
    CpuBackend backend(1);
    CommGrid grid(exchange, Layout{}, std::chrono::seconds(5), true);
    ParameterStore params(backend, model, Layout{}, grid.coords());
    params.initialize(99);
    Gpt gpt(backend, grid, model, mb, params);
    std::vector<int32_t> in(static_cast<size_t>(m)), out(in.size());
    for (int64_t i = 0; i < m; ++i) {
      in[static_cast<size_t>(i)] = token_at(i / model.sequence, i % model.sequence, model.vocab);
      out[static_cast<size_t>(i)] = token_at(i / model.sequence, i % model.sequence + 1, model.vocab);
    }
    DeviceBuffer<int32_t> tokens(backend, in), targets(backend, out);
    DeviceBuffer<float> loss_sum(backend, 1);
    const int64_t n = params.size();
    auto loss = [&] {  // mean loss; leaves the gradient of it in params.grads()
      params.zero_grads();
      backend.memset_zero(loss_sum.data(), sizeof(float));
      gpt.forward_backward(tokens.data(), targets.data(), 1.0f / static_cast<float>(m), loss_sum.data());
      return static_cast<double>(loss_sum.download()[0]) / static_cast<double>(m);
    };
    std::vector<float> p(static_cast<size_t>(n)), g(p.size());
    const double base = loss();
    backend.copy_to_host(p.data(), params.params(), p.size() * sizeof(float));
    backend.copy_to_host(g.data(), params.grads(), g.size() * sizeof(float));
    // GPT-2's init keeps the residual stream small (std ~0.03), so LayerNorm makes the loss
    // curved on the scale of a float32-friendly step: the central difference's eps^2 error
    // was measured at up to 6% with eps = 1e-2, and it shrinks as eps does (convergence to the
    // analytic value checked down to eps = 2.5e-3). Richardson's (4 D(eps/2) - D(eps)) / 3
    // cancels the eps^2 term; what remains is float32 rounding of the mean loss (~2.4e-7 over
    // 2·eps/2, times 4/3: ~3.2e-5 at worst) plus a relative eps^4 term.
    const float eps = 2e-2f;
    int checked = 0;
    for (const auto& slot : params.layout().slots) {
      float max_grad = 0;
      for (int64_t i = 0; i < slot.count; ++i)
        max_grad = std::max(max_grad, std::fabs(g[static_cast<size_t>(slot.offset + i)]));
      EXPECT_GT(max_grad, 1e-5f) << slot.spec.name << " has no gradient: the check would prove nothing";
      for (int64_t i = 0; i < slot.count; i += std::max<int64_t>(1, slot.count / 6)) {
        const size_t at = static_cast<size_t>(slot.offset + i);
        auto perturbed = [&](float delta) {
          std::vector<float> q = p;
          q[at] += delta;
          backend.copy_to_device(params.params(), q.data(), q.size() * sizeof(float));
          return loss();
        };
        auto central = [&](float h) { return (perturbed(h) - perturbed(-h)) / (2.0 * static_cast<double>(h)); };
        const double numeric = (4.0 * central(eps / 2) - central(eps)) / 3.0;
        EXPECT_NEAR(g[at], numeric, 5e-5 + 3e-3 * std::fabs(numeric)) << slot.spec.name << "[" << i << "]";
        ++checked;
      }
    }
    backend.copy_to_device(params.params(), p.data(), p.size() * sizeof(float));
    EXPECT_EQ(loss(), base) << "the forward is deterministic";
    EXPECT_GT(checked, 100);
  });
}

}  // namespace
}  // namespace axonn
