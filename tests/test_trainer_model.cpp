// The 4D-parallel GPT (trainer/model) on ranks that are threads of this process, over the
// real Gloo communicators: the parameter table tiles every tensor, init does not depend on
// the layout, the single-rank gradient matches finite differences, and for many layouts one
// step's loss and synchronized gradients equal the serial run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

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
using test::RankSetup;
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
    EXPECT_EQ(pl.total - pl.sharded, predicted.small) << text;
    // Decayed tensors form one prefix that contains every sharded one.
    EXPECT_GE(pl.decayed, pl.sharded);
    for (const auto& s : pl.slots) EXPECT_EQ(s.spec.decay, s.offset < pl.decayed) << s.spec.name;
  }
  EXPECT_THROW(shard_rect(gpt_parameters(model)[0], parse_layout("1x3x1x1"), Coords{}), LayoutError);
}

// With the optimizer sharded over data every gradient bucket is padded to G_data equal pieces
// (the layout model's sharded_count, which prices them), the data ranks' state runs cover each
// bucket's pieces once, and their moment slices tile every moment tensor once per replica of
// the other axes, each rectangle consecutive in the moments' buffer.
TEST(TrainerParameters, ShardedOptimizerStateTilesEveryMomentOncePerDataGroup) {
  ModelShape model = tiny_model();
  model.sequence = 7;  // small tensors: 2*(6*16 + 7*16) + 2*16 + 7*16 elements, not a multiple of 3 or 4
  for (const char* text : {"2x1x1x1", "3x1x1x1", "4x1x2x1", "2x2x1x2", "3x2x1x1", "1x2x1x2"}) {
    const Layout layout = parse_layout(text);
    const ShardedCount predicted = sharded_count(model, layout, true);
    std::map<std::string, std::map<std::vector<int64_t>, int64_t>> moment_cover;  // tensor -> first element -> times
    for (int r = 0; r < layout.world(); ++r) {
      const Coords at = layout.coords(r);
      const ParameterLayout pl = parameter_layout(model, layout, at, true);
      EXPECT_EQ(pl.pieces, layout.data) << text;
      EXPECT_EQ(pl.total, predicted.stored) << text;
      EXPECT_EQ(pl.sharded, predicted.stored_big) << text;
      ASSERT_EQ(pl.buckets.size(), static_cast<size_t>(model.layers) + 2) << text;
      const GradientBuckets model_buckets = gradient_buckets(model, layout);
      EXPECT_EQ(pl.bucket("wte").count, model_buckets.wte);
      EXPECT_EQ(pl.bucket("h.1").count, model_buckets.block);
      EXPECT_EQ(pl.small_bucket().count, model_buckets.small);
      for (const ParamBucket& b : pl.buckets) {
        EXPECT_EQ(b.padded % layout.data, 0) << text << " " << b.name;
        EXPECT_LT(b.padded - b.count, layout.data) << text << " " << b.name;
      }
      const std::vector<StateRun> runs = optimizer_state_runs(pl, at.data);
      int64_t owned = 0;
      for (const StateRun& run : runs) owned += run.count;
      EXPECT_EQ(owned, predicted.owned) << text;
      for (const StateSlice& s : state_slices(pl, runs)) {
        EXPECT_EQ(s.split_over_data, s.buffer != StateBuffer::params && layout.data > 1) << s.name;
        if (s.buffer == StateBuffer::params) continue;
        EXPECT_TRUE(contains(s.slot->rect, s.rect)) << text << " " << s.name;
        EXPECT_GE(s.offset, 0);
        EXPECT_LE(s.offset + element_count(s.rect), owned) << text << " " << s.name;
        // Only the ranks at coordinate 0 of the other replica axes, so each part counts once.
        bool first_replica = true;
        for (Axis a : replica_axes(s.slot->spec)) first_replica &= a == Axis::data || at[a] == 0;
        if (!first_replica) continue;
        auto& cover = moment_cover[s.name];
        const std::vector<int64_t> shape = s.slot->spec.shape;
        for (int64_t i = 0; i < element_count(s.rect); ++i) ++cover[{global_index(shape, s.rect, i)}];
      }
    }
    for (const ParamSpec& spec : gpt_parameters(model))
      for (const char* prefix : {"adam.m/", "adam.v/"}) {
        const auto& cover = moment_cover[prefix + spec.name];
        EXPECT_EQ(static_cast<int64_t>(cover.size()), element_count(spec.shape)) << text << " " << prefix << spec.name;
        for (const auto& [element, times] : cover) ASSERT_EQ(times, 1) << text << " " << prefix << spec.name;
      }
  }
  // Unsharded (or G_data = 1) the layout is the unpadded one and the state covers everything.
  const Layout one = parse_layout("1x2x1x2");
  const ParameterLayout plain = parameter_layout(model, one, one.coords(1), true);
  EXPECT_EQ(plain.pieces, 1);
  EXPECT_EQ(plain.total, parameters_per_rank(model, one).total());
}

// Elements [begin, end) of a rectangle's row-major order, as rectangles: every element once,
// in order, each rectangle consecutive.
TEST(TrainerParameters, FlatRangesOfARectangleAreConsecutiveRectangles) {
  const Rect rect{{2, 0, 4}, {3, 3, 5}};  // inside a [6, 3, 12] tensor
  const std::vector<int64_t> shape = {6, 3, 12};
  for (int64_t begin = 0; begin <= 45; begin += 4)
    for (int64_t end = begin; end <= 45; end += 7) {
      const std::vector<FlatRect> parts = flat_range_rects(rect, begin, end);
      EXPECT_LE(parts.size(), 5u);
      int64_t next = begin;
      for (const FlatRect& f : parts) {
        ASSERT_EQ(f.begin, next) << begin << " " << end;
        ASSERT_TRUE(contains(rect, f.rect));
        for (int64_t i = 0; i < element_count(f.rect); ++i)
          ASSERT_EQ(global_index(shape, f.rect, i), global_index(shape, rect, f.begin + i)) << begin << " " << end;
        next += element_count(f.rect);
      }
      EXPECT_EQ(next, std::max(begin, end)) << begin << " " << end;
    }
  EXPECT_THROW(flat_range_rects(rect, 0, 46), std::invalid_argument);
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

// init_shards cuts the shards into pieces and draws them on threads: the same values as one
// init_shard per shard, whatever the pieces (7 elements: one row each here; 1 << 22: whole)
// and the thread count; a rect outside its tensor is init_shard's error.
TEST(TrainerParameters, ShardsDrawnInPiecesOnThreadsEqualOneDrawEach) {
  const ModelShape model = tiny_model();
  const Layout layout = parse_layout("1x2x2x2");
  const std::vector<ParamSpec> specs = gpt_parameters(model);
  std::vector<Rect> rects;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const ParamSpec& spec : specs) {
    rects.push_back(shard_rect(spec, layout, layout.coords(5)));
    offsets.push_back(total);
    total += static_cast<size_t>(element_count(rects.back()));
  }
  std::vector<float> expected(total);
  for (size_t i = 0; i < specs.size(); ++i) init_shard(specs[i], rects[i], 11, expected.data() + offsets[i]);
  for (const auto& [threads, piece] : std::vector<std::pair<int, int64_t>>{{1, 7}, {3, 7}, {4, 1 << 22}, {0, 100}}) {
    std::vector<float> drawn(total, -1.0f);
    std::vector<ShardInit> shards;
    for (size_t i = 0; i < specs.size(); ++i) shards.push_back({&specs[i], rects[i], drawn.data() + offsets[i]});
    init_shards(shards, 11, threads, piece);
    EXPECT_EQ(std::memcmp(drawn.data(), expected.data(), total * sizeof(float)), 0)
        << threads << " threads, pieces of " << piece;
  }
  std::vector<float> one(static_cast<size_t>(element_count(specs[0].shape)) + 1);
  Rect outside = full_rect(specs[0].shape);
  outside.offset[0] = 1;
  EXPECT_THROW(init_shards({{&specs[0], outside, one.data()}}, 11, 2, 7), std::exception);
}

// zero() is the state a checkpoint's load fills (a run that resumes skips the draw): every
// parameter, gradient and moment 0, the sharded optimizer's padding too; initialize() after it
// draws the same weights as at once, with the moments zero again.
TEST(TrainerParameters, ZeroClearsEveryBufferAndTheInitAfterItIsTheSame) {
  const ModelShape model = tiny_model();
  const Layout layout = parse_layout("2x1x1x1");
  CpuBackend backend(1);
  ParameterStore drawn(backend, model, layout, layout.coords(1), true),
      cleared(backend, model, layout, layout.coords(1), true);
  ASSERT_GT(cleared.state_size(), 0);
  drawn.initialize(5);
  cleared.initialize(5);
  auto host = [&](const float* device, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    backend.copy_to_host(out.data(), device, out.size() * sizeof(float));
    return out;
  };
  std::fill_n(cleared.params(), cleared.size(), 3.0f);  // as a step leaves them, and more
  std::fill_n(cleared.grads(), cleared.size(), -2.0f);
  std::fill_n(cleared.adam_m(), cleared.state_size(), 1.5f);
  std::fill_n(cleared.adam_v(), cleared.state_size(), 0.5f);
  cleared.zero();
  const std::vector<float> zeros(static_cast<size_t>(cleared.size()), 0.0f),
      state_zeros(static_cast<size_t>(cleared.state_size()), 0.0f);
  EXPECT_EQ(host(cleared.params(), cleared.size()), zeros);
  EXPECT_EQ(host(cleared.grads(), cleared.size()), zeros);
  EXPECT_EQ(host(cleared.adam_m(), cleared.state_size()), state_zeros);
  EXPECT_EQ(host(cleared.adam_v(), cleared.state_size()), state_zeros);
  std::fill_n(cleared.adam_m(), cleared.state_size(), 1.5f);
  cleared.initialize(5);
  EXPECT_EQ(host(cleared.params(), cleared.size()), host(drawn.params(), drawn.size()));
  EXPECT_NE(host(cleared.params(), cleared.size()), zeros);
  EXPECT_EQ(host(cleared.adam_m(), cleared.state_size()), host(drawn.adam_m(), drawn.state_size()));
}

// `got` against the serial run: float32 sums in another order, a few ulps of the loss (~3.5,
// ulp 2.4e-7), and every gradient element within 1e-5 of its tensor's largest.
void expect_within_serial_bound(const StepResult& got, const StepResult& serial, const std::string& what) {
  EXPECT_NEAR(got.loss, serial.loss, 2e-6) << what;
  EXPECT_NEAR(got.grad_norm, serial.grad_norm, 1e-5 * serial.grad_norm) << what;
  for (const auto& [name, want] : serial.grads) {
    const auto& have = got.grads.at(name);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(have[i], want[i], 1e-5f * scale + 1e-9f) << what << " " << name << "[" << i << "]";
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
    expect_within_serial_bound(run_step(model, layout, global_batch, micro_batch), serial, text);
  }
}

// Overlap moves the z all-gathers, the data all-reduce and the backward's dX all-reduces over
// x and y (OAR) beside compute; the same collectives run on the same buffers, so every layout
// gives the same bits with it on, and the counted bytes and calls (checked in run_step) stay
// the model's. The tensor-parallel layouts are those where every x and y all-reduce of dX is
// started: 1x2x1x2, 1x1x2x2, 2x2x2x1, 1x4x1x1.
TEST(TrainerModel, OverlappedCollectivesGiveTheSameBits) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x2", "1x1x2x2:zyxd", "2x1x1x2", "4x1x1x1", "2x2x1x2", "1x2x1x4", "2x1x2x1",
                           "1x2x1x2", "1x1x2x2", "2x2x2x1", "1x4x1x1"}) {
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

// training.tp_chunks splits each micro-batch's rows for the linear layers' x and y
// all-reduces (ShardedLinear, the LM head): every chunk count, overlap on and off, stays within
// the float32 bound of the serial run that the layouts keep. Each element is still one k-long
// sum and a group of 2 adds the same two numbers, but OpenBLAS rounds a row by where it falls
// in its kernels' blocks (trainer/cpu/gemm.hpp), so on the CPU a chunk's rows may differ from
// the whole GEMM's in the last place (the emulated CUDA path, whose GEMMs do not, keeps the
// bits: test_trainer_model_emulated). A ring over 4 ranks (1x4x1x1) also splits a chunk
// differently from the whole. An MoE model's dense layers chunk (its experts do not). run_step
// checks the counted calls and bytes against the model's chunked calls.
TEST(TrainerModel, TensorParallelChunksKeepTheSums) {
  ModelShape model = tiny_model();
  for (const bool moe : {false, true}) {
    if (moe) {
      model.experts = 4;
      model.top_k = 2;
    }
    const StepResult serial = run_step(model, parse_layout("1x1x1x1"), 8, 2);
    for (const char* text : moe ? std::vector<const char*>{"1x2x2x1"}
                                : std::vector<const char*>{"1x2x1x2", "1x1x2x2", "2x2x2x1", "1x4x1x1"}) {
      const Layout layout = parse_layout(text);
      for (const bool overlap : {false, true}) {
        for (const int chunks : {1, 2, 4}) {
          const std::string what = std::string(text) + (moe ? " moe" : "") + (overlap ? " overlap" : "") + ", " +
                                   std::to_string(chunks) + " chunks";
          RankSetup setup;
          setup.tp_chunks = chunks;
          const StepResult chunked = run_step(model, layout, 8, 2, overlap, setup);
          expect_within_serial_bound(chunked, serial, what + " vs serial");
        }
      }
    }
  }
}

// A started all-reduce of dX whose peer never arrives fails the backward where it is finished,
// with the message a blocking one gives: the axis, the ranks, the timeout and the rank that did
// not arrive (the grid's watch); the communicator's thread drops what is queued behind it, so
// the grid closes at once. attn.proj's shape: k = C over y, n over x, so dX is summed over x.
TEST(TrainerModel, AStartedAllReduceOfDxWhosePeerNeverComesFailsNamingIt) {
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string message;
  test::run_ranks(2, [&](int rank, Exchange& exchange) {
    const std::unique_ptr<Backend> backend = test::one_thread_cpu_backend();
    CommGrid grid(exchange, parse_layout("1x2x1x1"), std::chrono::milliseconds(800), true);
    const int64_t C = 16, m = 8, c = C / 2;
    DeviceBuffer<float> w(*backend, std::vector<float>(static_cast<size_t>(C * c), 0.5f));
    DeviceBuffer<float> grad(*backend, static_cast<size_t>(C * c));
    DeviceBuffer<float> x(*backend, std::vector<float>(static_cast<size_t>(m * C), 1.0f));
    DeviceBuffer<float> dy(*backend, std::vector<float>(static_cast<size_t>(m * c), 1.0f));
    DeviceBuffer<float> dx(*backend, static_cast<size_t>(m * C));
    ShardedLinear proj(*backend, grid, C, C, Axis::y, w.data(), grad.data(), nullptr, nullptr, nullptr, true);
    GradScatter unused;
    if (rank == 1) {  // alive, but never comes to the backward
      while (!failed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    try {
      proj.backward(dy.data(), x.data(), dx.data(), m, unused);
      ADD_FAILURE() << "the backward returned without rank 1";
    } catch (const CommError& e) {
      std::lock_guard lock(mu);
      message = e.what();
    }
    failed = true;
  });
  EXPECT_EQ(message.rfind("all_reduce on axis 'x' (world ranks 0,1, 512 bytes) timed out after 800 ms: ", 0), 0u)
      << message;
  EXPECT_NE(message.find("world rank 1 on host "), std::string::npos) << message;
  EXPECT_NE(message.find(") did not arrive: it runs but is in no collective"), std::string::npos) << message;
}

// An MoE model's experts sum their input gradients over x (proj) and y (fc) beside their dW
// GEMMs with overlap (OAR): the same bits as blocking, dropless and with a capacity, with the
// experts split over x and y and over the expert axis.
TEST(TrainerModel, OverlappedExpertInputGradientsGiveTheSameBits) {
  ModelShape model = tiny_model();
  model.experts = 4;
  model.top_k = 2;
  for (const double capacity : {0.0, 1.0})
    for (const char* text : {"1x2x2x1", "2x2x1x1e2", "1x1x2x2"}) {
      SCOPED_TRACE(std::string(text) + (capacity > 0 ? " capacity" : " dropless"));
      model.capacity_factor = capacity;
      const Layout layout = parse_layout(text);
      expect_same_bits(run_step(model, layout, 8, 1, true), run_step(model, layout, 8, 1, false), "overlap on vs off");
    }
}

// model.moe_chunks pipelines the expert all-to-all in rounds of local experts (MoeShape::rounds):
// each round's expert GEMMs are the unpipelined ones, so every layout where it applies gives
// the bits of one exchange, dropless and with a capacity, with overlap off and on, counting
// the model's calls and bytes (run_step checks them).
TEST(TrainerModel, PipelinedExpertRoundsGiveTheBitsOfOneExchange) {
  ModelShape model = tiny_model();
  model.experts = 8;
  model.top_k = 2;
  for (const double capacity : {0.0, 1.0})
    for (const char* text : {"2x1x1x1e2", "4x1x1x1e4", "2x1x1x2e2", "4x1x1x1e2:dzyx"})
      for (const bool overlap : {false, true}) {
        SCOPED_TRACE(std::string(text) + (overlap ? " overlap" : "") + (capacity > 0 ? " capacity" : " dropless"));
        model.capacity_factor = capacity;
        const Layout layout = parse_layout(text);
        model.moe_chunks = 1;
        const StepResult one = run_step(model, layout, 8, 1, overlap);
        model.moe_chunks = 3;  // E_l = 4 or 2 local experts: rounds of 1-2 experts, or of one
        const StepResult rounds = run_step(model, layout, 8, 1, overlap);
        expect_same_bits(rounds, one, "rounds vs one exchange");
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

// The optimizer sharded over data (training.shard_optimizer): each data rank reduce-scatters
// the gradient buckets, updates its pieces and all-gathers the weights. On Gloo the
// reduce-scatter adds each element in the order the all-reduce it replaces does (on the sync
// pairs, as every bucket of this model: test_comm), and AdamW is
// elementwise, so without clipping 3 steps give the unsharded run's losses, weights and both
// moments bit for bit, in every recompute mode, with overlap off and on; each rank counts the
// layout model's bytes (run_steps checks them). The gradient norm adds the same squares in
// other groups (each data rank its pieces), so it differs by at most 2*gamma(P) of itself
// (P: the parameters, gamma(k) = k*u/(1-k*u), u = 2^-24), and with clipping active the clip
// scale with it: AdamW's update m/sqrt(v) moves by at most twice that relative change, so the
// weights by at most steps * lr * 4 * gamma(P).
class TrainerShardedOptimizer : public ::testing::TestWithParam<const char*> {};

double gamma_of(int64_t k) {
  const double u = std::ldexp(1.0, -24);
  return static_cast<double>(k) * u / (1 - static_cast<double>(k) * u);
}

TEST_P(TrainerShardedOptimizer, TrainsToTheBitsOfTheUnshardedOptimizer) {
  const ModelShape model = tiny_model();
  const Layout layout = parse_layout(GetParam());
  ASSERT_GE(layout.data, 2);
  const int steps = 3;
  const double norm_bound = 2 * gamma_of(parameters_total(model));
  const test::TrainResult plain = test::run_steps(model, layout, 8, 1, steps, 0.0);
  ASSERT_EQ(plain.losses.size(), static_cast<size_t>(steps));
  const std::vector<float>& v = plain.state.at("adam.v/wte");
  EXPECT_GT(*std::max_element(v.begin(), v.end()), 0.0f) << "the optimizer should have run";
  for (Recompute mode : kRecomputeModes)
    for (bool overlap : {false, true}) {
      const std::string what = std::string(GetParam()) + " sharded, recompute " + recompute_name(mode) +
                               (overlap ? ", overlap on" : ", overlap off");
      test::RankSetup setup;
      setup.recompute = mode;
      setup.shard_optimizer = true;
      const test::TrainResult sharded = test::run_steps(model, layout, 8, 1, steps, 0.0, overlap, setup);
      ASSERT_EQ(sharded.losses.size(), plain.losses.size()) << what;
      for (size_t i = 0; i < plain.losses.size(); ++i) {
        EXPECT_EQ(std::bit_cast<uint64_t>(sharded.losses[i]), std::bit_cast<uint64_t>(plain.losses[i]))
            << what << " step " << i;
        EXPECT_NEAR(sharded.grad_norms[i], plain.grad_norms[i], norm_bound * plain.grad_norms[i]) << what;
      }
      const test::StateDifference d = test::state_difference(sharded, plain);
      EXPECT_EQ(d.largest, 0.0f) << what << ": " << d.where;
    }
  // Clipping on, below every step's norm: the clip scale follows the norm's rounding.
  const double clip = 0.5 * *std::min_element(plain.grad_norms.begin(), plain.grad_norms.end());
  const test::TrainResult clipped = test::run_steps(model, layout, 8, 1, steps, clip);
  test::RankSetup setup;
  setup.shard_optimizer = true;
  const test::TrainResult sharded = test::run_steps(model, layout, 8, 1, steps, clip, true, setup);
  const double weight_bound = steps * 1e-2 * 2 * norm_bound;
  const test::StateDifference d = test::state_difference(sharded, clipped);
  std::printf(
      "[ measured ] %s clipped at %.3f: sharded weights and moments within %.3g of unsharded (bound %.3g on "
      "the weights)\n",
      GetParam(), clip, static_cast<double>(d.largest), weight_bound);
  for (const auto& [name, w] : clipped.state) {
    if (name.rfind("adam.", 0) == 0) continue;  // the moments scale with the clip scale
    const std::vector<float>& g = sharded.state.at(name);
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_LE(std::fabs(double{g[i]} - w[i]), weight_bound) << GetParam() << " clipped " << name << "[" << i << "]";
  }
  EXPECT_EQ(std::bit_cast<uint64_t>(sharded.losses[0]), std::bit_cast<uint64_t>(clipped.losses[0]))
      << "the first step's loss is before any update";
}

// G_data = 2, 4 and 8, with the tensor axes split beside it in some.
INSTANTIATE_TEST_SUITE_P(Layouts, TrainerShardedOptimizer,
                         ::testing::Values("2x1x1x1", "2x1x1x2", "4x1x1x1", "2x2x1x2", "8x1x1x1"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           return std::string(param_info.param);
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
