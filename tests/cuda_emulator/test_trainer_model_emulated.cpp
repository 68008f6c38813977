// One step of the 4D-parallel GPT on the emulated CUDA backend (cuda_emulator.hpp), ranks as
// threads over Gloo (the emulation keeps device buffers in host memory, so Gloo can move
// them), against the same step on the CPU backend: what test_train_gpu checks on a GPU, minus
// NCCL and the GPU itself. With exact float32 GEMMs (GemmMath::fp32) the two differ only in
// summation order; with bf16 tensor cores (GEMMs and attention) by bf16 rounding. The
// emulated NCCL (include/nccl.h) then runs the same steps as Gloo does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/trace_recorder.hpp"
#include "layout/model_plan.hpp"
#include "model_step.hpp"
#include "thread_exchange.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/cuda/cuda_backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/train/trace_ops.hpp"
#include "trainer/train/trainer.hpp"

namespace axonn {
namespace {

using test::run_step;
using test::StepResult;

// Wider than test_trainer_model's (head size 16, not 4, over 16 positions).
ModelShape tiny_model() { return ModelShape{.layers = 2, .hidden = 32, .heads = 2, .vocab = 48, .sequence = 16}; }

// The emulated CUDA backend with Gloo (on its buffers, which the emulation keeps in host
// memory) or with the emulated NCCL, ordered against the backend's stream as axonn train does.
test::RankSetup emulated_cuda(GemmMath math, CommBackend comm = CommBackend::gloo,
                              ElementType activations = ElementType::float32) {
  test::RankSetup setup;
  setup.make_backend = [math, activations] { return make_cuda_backend(CudaBackendOptions{0, math, activations}); };
  setup.comm = comm;
  if (comm == CommBackend::nccl) setup.compute_stream = cuda_stream_of;
  return setup;
}

// The largest |got − want| over every gradient element, over the largest |want|.
double gradient_error(const StepResult& got, const StepResult& want) {
  double error = 0, scale = 0;
  for (const auto& [name, w] : want.grads) {
    const auto& g = got.grads.at(name);
    for (size_t i = 0; i < w.size(); ++i) {
      error = std::max(error, std::fabs(static_cast<double>(g[i]) - w[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
    }
  }
  return error / scale;
}

TEST(TrainerModelEmulatedCuda, Fp32StepMatchesTheCpuOnEveryAxis) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x1", "2x1x1x1", "1x2x1x1", "1x1x2x1", "1x1x1x2", "2x2x1x2", "1x1x2x2:zyxd"}) {
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(std::string(text) + (overlap ? " overlap on" : " overlap off"));
      const Layout layout = parse_layout(text);
      const StepResult cpu = run_step(model, layout, 4, 2, overlap);
      const StepResult cuda = run_step(model, layout, 4, 2, overlap, emulated_cuda(GemmMath::fp32));
      // float32 sums in other orders: a few ulps of the loss (~3.9), 1e-5 of the gradients.
      EXPECT_NEAR(cuda.loss, cpu.loss, 4e-6);
      EXPECT_NEAR(cuda.grad_norm, cpu.grad_norm, 1e-5 * cpu.grad_norm);
      EXPECT_LE(gradient_error(cuda, cpu), 1e-5);
    }
  }
}

// NCCL's collectives run on their communicators' streams; started ones are outstanding
// until every peer has reached them, and finish() makes the compute stream wait. Overlap
// moves when they run, never what they add in which order: the same bits on and off, also
// for the backward's dX all-reduces over x and y beside the dW GEMMs (OAR) at the
// tensor-parallel layouts 1x2x1x2, 1x1x2x2, 2x2x2x1 and 1x4x1x1. Gloo sums groups of more
// than two in another order than NCCL's rank order: rounding apart.
TEST(TrainerModelEmulatedCuda, NcclStepEqualsGlooAndOverlapKeepsItsBits) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x2", "2x1x1x1", "1x2x1x1", "1x1x2x1", "2x2x1x2", "1x1x2x2:zyxd", "1x2x1x4",
                           "1x2x1x2", "1x1x2x2", "2x2x2x1", "1x4x1x1"}) {
    SCOPED_TRACE(text);
    const Layout layout = parse_layout(text);
    const StepResult gloo = run_step(model, layout, 8, 2, false, emulated_cuda(GemmMath::fp32));
    const StepResult blocking = run_step(model, layout, 8, 2, false, emulated_cuda(GemmMath::fp32, CommBackend::nccl));
    const StepResult overlapped = run_step(model, layout, 8, 2, true, emulated_cuda(GemmMath::fp32, CommBackend::nccl));
    EXPECT_NEAR(blocking.loss, gloo.loss, 1e-6 * gloo.loss);
    EXPECT_LE(gradient_error(blocking, gloo), 1e-6);
    EXPECT_EQ(overlapped.loss, blocking.loss);
    EXPECT_EQ(overlapped.grad_norm, blocking.grad_norm);
    EXPECT_EQ(gradient_error(overlapped, blocking), 0.0);
  }
}

// training.tp_chunks on the emulated CUDA backend and NCCL: its GEMMs sum each element in the
// same order whatever the rows, and its all-reduce adds the ranks' values in rank order
// whatever the buffer, so every chunk count gives the bits of one chunk (overlap on: the
// chunks' sums on the communicators' streams beside the GEMMs; off is the CPU test's), at the
// tensor-parallel layouts and an MoE one (its dense layers chunk); against the CPU's serial run
// within the float32 bound.
TEST(TrainerModelEmulatedCuda, TensorParallelChunksKeepTheBits) {
  ModelShape model = tiny_model();
  const auto nccl = [](int chunks) {
    test::RankSetup setup = emulated_cuda(GemmMath::fp32, CommBackend::nccl);
    setup.tp_chunks = chunks;
    return setup;
  };
  for (const bool moe : {false, true}) {
    if (moe) {
      model.experts = 4;
      model.top_k = 2;
    }
    const StepResult serial = run_step(model, parse_layout("1x1x1x1"), 8, 2, false);
    for (const char* text : moe ? std::vector<const char*>{"1x2x2x1"}
                                : std::vector<const char*>{"1x2x1x2", "1x1x2x2", "2x2x2x1", "1x4x1x1"}) {
      const Layout layout = parse_layout(text);
      const StepResult one = run_step(model, layout, 8, 2, true, nccl(1));
      EXPECT_NEAR(one.loss, serial.loss, 4e-6) << text;
      EXPECT_LE(gradient_error(one, serial), 1e-5) << text;
      for (const int chunks : {2, 4})
        test::expect_same_bits(run_step(model, layout, 8, 2, true, nccl(chunks)), one,
                               std::string(text) + (moe ? " moe, " : ", ") + std::to_string(chunks) + " chunks vs one");
    }
  }
}

// An MoE model's experts split over x and y sum their input gradients beside their dW GEMMs
// with overlap (OAR), on the emulated NCCL streams: the bits of the blocking step.
TEST(TrainerModelEmulatedCuda, OverlappedExpertInputGradientsKeepTheirBits) {
  ModelShape model = tiny_model();
  model.experts = 4;
  model.top_k = 2;
  for (const char* text : {"1x2x2x1", "2x2x1x1e2"}) {
    SCOPED_TRACE(text);
    const Layout layout = parse_layout(text);
    const auto nccl = emulated_cuda(GemmMath::fp32, CommBackend::nccl);
    test::expect_same_bits(run_step(model, layout, 8, 2, true, nccl), run_step(model, layout, 8, 2, false, nccl),
                           "overlap on vs off");
  }
}

// An MoE model (4 experts, top-2, dropless, both blocks) at expert parallelism 1, 2 and 4,
// the y group splitting the exchange at 2x1x2x1e2: the emulated CUDA backend's step against
// the CPU's, over Gloo and over the emulated NCCL (its all-to-alls are grouped send/recv);
// then the gather dispatch and the pipelined rounds.
TEST(TrainerModelEmulatedCuda, MoeStepMatchesTheCpuAtEveryExpertParallelism) {
  ModelShape model = tiny_model();
  model.experts = 4;
  model.top_k = 2;
  for (const char* text : {"1x1x1x1", "2x1x1x1e2", "2x1x2x1e2", "4x1x1x1e4"}) {
    const Layout layout = parse_layout(text);
    const StepResult cpu = run_step(model, layout, 8, 2, false);
    for (const CommBackend comm : {CommBackend::gloo, CommBackend::nccl}) {
      SCOPED_TRACE(std::string(text) + (comm == CommBackend::nccl ? " nccl" : " gloo"));
      const StepResult cuda = run_step(model, layout, 8, 2, false, emulated_cuda(GemmMath::fp32, comm));
      EXPECT_NEAR(cuda.loss, cpu.loss, 4e-6);
      EXPECT_LE(gradient_error(cuda, cpu), 1e-5);
    }
  }
  // A capacity of 1.25: at E_p = 2 the expert group all-gathers its tokens and reduce-scatters
  // the outputs (MoeShape::gathers), with and without a y group.
  model.capacity_factor = 1.25;
  for (const char* text : {"2x1x1x1e2", "2x1x2x1e2f"}) {
    const Layout layout = parse_layout(text);
    BatchSplit split;
    split.micro_batch = 2;
    split.tokens = 2 * model.sequence;
    ASSERT_TRUE(moe_shape(model, split, layout).gathers) << text;
    const StepResult cpu = run_step(model, layout, 8, 2, false);
    for (const CommBackend comm : {CommBackend::gloo, CommBackend::nccl}) {
      SCOPED_TRACE(std::string(text) + (comm == CommBackend::nccl ? " nccl" : " gloo"));
      const StepResult cuda = run_step(model, layout, 8, 2, false, emulated_cuda(GemmMath::fp32, comm));
      EXPECT_NEAR(cuda.loss, cpu.loss, 4e-6);
      EXPECT_LE(gradient_error(cuda, cpu), 1e-5);
    }
  }
  // Dropless again, the exchange pipelined in two rounds of one local expert each
  // (MoeShape::rounds): the started all-to-alls on the emulated NCCL stream and on Gloo's
  // thread give the bits of one exchange.
  model.capacity_factor = 0;
  const Layout pair = parse_layout("2x1x1x1e2");
  for (const CommBackend comm : {CommBackend::gloo, CommBackend::nccl}) {
    SCOPED_TRACE(comm == CommBackend::nccl ? "rounds nccl" : "rounds gloo");
    model.moe_chunks = 1;
    const StepResult one = run_step(model, pair, 8, 2, false, emulated_cuda(GemmMath::fp32, comm));
    model.moe_chunks = 2;
    const StepResult two = run_step(model, pair, 8, 2, false, emulated_cuda(GemmMath::fp32, comm));
    expect_same_bits(two, one, "two rounds vs one");
  }
}

TEST(TrainerModelEmulatedCuda, Bf16StepIsWithinBf16ErrorOfTheCpu) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x1", "2x2x1x2"}) {
    SCOPED_TRACE(text);
    const Layout layout = parse_layout(text);
    const StepResult cpu = run_step(model, layout, 4, 2, true);
    const StepResult cuda = run_step(model, layout, 4, 2, true, emulated_cuda(GemmMath::bf16));
    std::cout << "[ measured ] " << text << ": loss " << cuda.loss << " vs " << cpu.loss << ", gradient error "
              << gradient_error(cuda, cpu) << "\n";
    // Measured: loss 1.3e-5 relative, gradients 3.1e-3 normalized (both layouts).
    EXPECT_NEAR(cuda.loss, cpu.loss, 1e-3 * cpu.loss);
    EXPECT_LE(gradient_error(cuda, cpu), 2e-2);
    EXPECT_GT(gradient_error(cuda, cpu), 0.0) << "bf16 must round: the step did not use the tensor-core math";
  }
}

// Mixed precision as training.dtype = "bfloat16" runs it: bf16 activations, the GEMMs' bf16
// copy of the weights (gathered over z in bf16), float32 gradients. run_step checks the
// counted bytes against the layout model at bf16 (half for weights and activations).
TEST(TrainerModelEmulatedCuda, Bf16ActivationsStepIsWithinBf16ErrorOfTheCpu) {
  const ModelShape model = tiny_model();
  for (const char* text : {"1x1x1x1", "2x2x1x2", "1x1x2x2:zyxd", "1x2x2x1"}) {
    for (CommBackend comm : {CommBackend::gloo, CommBackend::nccl}) {
      SCOPED_TRACE(std::string(text) + " " + comm_backend_name(comm));
      const Layout layout = parse_layout(text);
      const StepResult cpu = run_step(model, layout, 4, 2, true);
      const StepResult cuda =
          run_step(model, layout, 4, 2, true, emulated_cuda(GemmMath::bf16, comm, ElementType::bfloat16));
      const StepResult f32 = run_step(model, layout, 4, 2, true, emulated_cuda(GemmMath::bf16, comm));
      std::cout << "[ measured ] " << text << " " << comm_backend_name(comm) << ": loss " << cuda.loss << " vs "
                << cpu.loss << ", gradient error " << gradient_error(cuda, cpu) << " (float32 storage "
                << gradient_error(f32, cpu) << ")\n";
      // Measured: loss 3e-5 relative, gradients 5.2e-3 to 6.6e-3 normalized (3.4e-3 with
      // float32 storage).
      EXPECT_NEAR(cuda.loss, cpu.loss, 1e-3 * cpu.loss);
      EXPECT_LE(gradient_error(cuda, cpu), 2e-2);
      EXPECT_GT(gradient_error(cuda, cpu), gradient_error(f32, cpu)) << "bf16 storage must round more than float32";
    }
  }
}

// Recomputation on the CUDA backend reruns the forward's kernels on the inputs they had (bf16
// activations included: the rerun reads the stored bf16 values the forward read), so every
// mode gives the bits of the run that keeps everything, on NCCL as a GPU runs it (overlap on
// and, for block recomputation, whose gathers it moves, off); run_step checks the counted
// bytes, rerun gathers and all-reduces included, against the layout model. Three layers:
// under block recomputation with overlap, blocks 0 and 2 share a set of gathered weights.
TEST(TrainerModelEmulatedCuda, RecomputationGivesTheBitsOfNoRecomputation) {
  ModelShape model = tiny_model();
  model.layers = 3;
  for (const char* text : {"1x1x1x1", "1x2x1x2", "2x1x2x1", "2x2x1x2"}) {
    for (ElementType activations : {ElementType::float32, ElementType::bfloat16}) {
      const std::string what = std::string(text) + " " + element_type_name(activations);
      SCOPED_TRACE(what);
      const Layout layout = parse_layout(text);
      const GemmMath math = activations == ElementType::float32 ? GemmMath::fp32 : GemmMath::bf16;
      const test::RankSetup kept_setup = emulated_cuda(math, CommBackend::nccl, activations);
      const StepResult kept = run_step(model, layout, 4, 2, true, kept_setup);
      for (const auto& [mode, overlap] : {std::pair{Recompute::attention, true}, std::pair{Recompute::block, true},
                                          std::pair{Recompute::block, false}}) {
        test::RankSetup setup = kept_setup;
        setup.recompute = mode;
        test::expect_same_bits(run_step(model, layout, 4, 2, overlap, setup), kept,
                               what + " recompute " + recompute_name(mode) + (overlap ? " overlap" : ""));
      }
    }
  }
}

// The optimizer sharded over data on the CUDA backend with NCCL, as a GPU runs it: the
// emulated NCCL adds every all-reduce and reduce-scatter in rank order, so 3 steps without
// clipping give the unsharded run's losses, weights and moments bit for bit at any G_data
// (on GPUs, NCCL's own orders agree at G_data = 2: test_train_gpu), in float32 and with bf16
// activations, overlap on and off; run_steps checks the counted bytes against the layout model.
TEST(TrainerModelEmulatedCuda, ShardedOptimizerTrainsToTheBitsOfTheUnshardedOne) {
  const ModelShape model = tiny_model();
  for (const char* text : {"2x1x1x1", "2x1x2x1", "4x1x1x1"}) {
    for (ElementType activations : {ElementType::float32, ElementType::bfloat16}) {
      const std::string what = std::string(text) + " " + element_type_name(activations);
      SCOPED_TRACE(what);
      const Layout layout = parse_layout(text);
      const GemmMath math = activations == ElementType::float32 ? GemmMath::fp32 : GemmMath::bf16;
      const test::RankSetup plain_setup = emulated_cuda(math, CommBackend::nccl, activations);
      const test::TrainResult plain = test::run_steps(model, layout, 4, 2, 3, 0.0, true, plain_setup);
      for (bool overlap : {true, false}) {
        test::RankSetup setup = plain_setup;
        setup.shard_optimizer = true;
        const test::TrainResult sharded = test::run_steps(model, layout, 4, 2, 3, 0.0, overlap, setup);
        EXPECT_EQ(sharded.losses, plain.losses) << what << (overlap ? " overlap" : "");
        const test::StateDifference d = test::state_difference(sharded, plain);
        EXPECT_EQ(d.largest, 0.0f) << what << (overlap ? " overlap: " : ": ") << d.where;
      }
    }
  }
}

// The held-out evaluation (Trainer::evaluate: the forward pass alone) on the CUDA backend, in
// float32 and with bf16 activations: the CPU's loss within each type's error, and a step after
// it the same bits as a step without it (evaluating changes nothing that trains).
TEST(TrainerModelEmulatedCuda, EvaluationMatchesTheCpuAndLeavesTrainingAlone) {
  JobConfig job;
  job.model = tiny_model();
  job.training.global_batch = 4;
  job.training.micro_batch = 2;
  job.training.recompute = Recompute::block;
  job.training.shard_optimizer = false;
  job.training.overlap_comm = true;
  const auto corpus = std::make_shared<const TokenData>(builtin_corpus());
  const DataMixture data({{corpus, 0, 40001, 1.0}}, job.training.seed, job.model.sequence);
  const DataMixture held_out({{corpus, 40000, 20001, 1.0}}, job.training.seed, job.model.sequence);
  struct Run {
    double evaluated = 0;
    float loss_after = 0;
  };
  const auto run = [&](Backend& backend, bool evaluate) {
    test::ThreadExchangeHub hub(1);
    test::ThreadExchange exchange(hub, 0);
    CommGrid grid(exchange, Layout{}, std::chrono::seconds(20), true);
    Trainer trainer(backend, grid, job, data);
    trainer.train_step();
    Run r;
    if (evaluate) r.evaluated = trainer.evaluate(held_out, 2);
    r.loss_after = static_cast<float>(trainer.train_step().loss);
    return r;
  };
  CpuBackend cpu(1);
  const Run want = run(cpu, true);
  EXPECT_GT(want.evaluated, 1.0);
  for (const auto& [activations, tolerance] :
       std::vector<std::pair<ElementType, double>>{{ElementType::float32, 1e-6}, {ElementType::bfloat16, 2e-3}}) {
    const std::unique_ptr<Backend> cuda = make_cuda_backend(CudaBackendOptions{0, GemmMath::fp32, activations});
    const Run with = run(*cuda, true);
    const Run without = run(*cuda, false);
    EXPECT_NEAR(with.evaluated, want.evaluated, tolerance * want.evaluated) << element_type_name(activations);
    EXPECT_EQ(with.loss_after, without.loss_after) << element_type_name(activations);
  }
}

// A traced step on a device backend: its ops timed by marks on the stream (no wait per op),
// on the "device stream" track, each inside the step as the host clock saw it, in order, and
// the GEMMs with their FLOPs. The untraced step before it records nothing.
TEST(TrainerModelEmulatedCuda, TracedStepTimesTheDeviceOpsByMarksOnTheStream) {
  const std::unique_ptr<Backend> cuda = make_cuda_backend(CudaBackendOptions{0, GemmMath::fp32});
  TraceRecorder trace(0, "rank 0");
  TraceOps ops(trace);
  ObservedBackend observed(*cuda, ops);
  test::ThreadExchangeHub hub(1);
  test::ThreadExchange exchange(hub, 0);
  CommGrid grid(exchange, Layout{}, std::chrono::seconds(20), true);
  JobConfig job;
  job.model = tiny_model();
  job.training.global_batch = 4;
  job.training.micro_batch = 2;
  job.training.recompute = Recompute::none;
  job.training.shard_optimizer = false;
  job.training.overlap_comm = false;
  const DataMixture data = DataMixture::single(std::make_shared<const TokenData>(builtin_corpus()), job.training.seed,
                                              job.model.sequence);
  Trainer trainer(observed, grid, job, data);
  trainer.train_step();
  EXPECT_EQ(trace.traced_events(), 0u);

  trace.set_active(true);
  const auto before = TraceRecorder::Clock::now();
  ops.begin_step(*cuda);
  trainer.train_step();
  ops.end_step(*cuda);
  const auto after = TraceRecorder::Clock::now();
  trace.set_active(false);
  ASSERT_GT(trace.traced_events(), 20u);

  const auto dir = std::filesystem::temp_directory_path() / ("axonn-trace-emulated-" + std::to_string(getpid()));
  std::string why;
  ASSERT_TRUE(trace.write(dir / "rank.json", &why)) << why;
  std::stringstream file;
  file << std::ifstream(dir / "rank.json").rdbuf();
  const std::string text = file.str();
  std::filesystem::remove_all(dir);
  // Each op event: "cat": "op", on the track named "device stream" (tid 1: the first named).
  EXPECT_NE(text.find("\"args\": {\"name\": \"device stream\"}"), std::string::npos) << text;
  const std::regex event(
      R"re(\{"name": "([^"]+)", "cat": "op", "ph": "X", "ts": ([0-9.]+), "dur": ([0-9.]+), "pid": 0, "tid": (\d+)(, "args": \{"flops": (\d+)\})?)re");
  const double unix_before =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count() -
      std::chrono::duration<double, std::micro>(TraceRecorder::Clock::now() - before).count();
  const double span_us = std::chrono::duration<double, std::micro>(after - before).count();
  int events = 0, gemms = 0;
  double last_start = 0;
  std::set<std::string> tracks;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), event); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const double ts = std::stod(m[2]), dur = std::stod(m[3]);
    ++events;
    tracks.insert(m[4]);
    EXPECT_GE(dur, 0.0) << m[0];
    EXPECT_GE(ts, last_start) << m[0] << ": out of stream order";
    // Within the traced step, give or take the clocks' offset taken at two moments (1 ms).
    EXPECT_GT(ts, unix_before - 1000) << m[0];
    EXPECT_LT(ts + dur, unix_before + span_us + 1000) << m[0];
    last_start = ts;
    if (m[1].str().rfind("gemm", 0) == 0) {
      ++gemms;
      EXPECT_TRUE(m[6].matched && std::stod(m[6]) > 0) << m[0];
    }
  }
  EXPECT_GT(events, 20);
  EXPECT_GT(gemms, 0);
  EXPECT_EQ(tracks.size(), 1u) << "every op on the device stream's track";
}

}  // namespace
}  // namespace axonn
