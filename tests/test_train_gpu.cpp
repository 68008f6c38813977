// `axonn train` on GPUs (label gpu): the CUDA backend with NCCL against the CPU backend with
// Gloo, the oracle, on the tiny job of train_helpers.hpp, as users run it (axonn run -n N).
// Every test needs a GPU and, without one, skips saying why ("no CUDA device: ..."); the
// multi-rank tests need one GPU per rank and say so when there are fewer.
//
// Bounds on the losses (~5.5, 5 or 6 steps):
// - float32 GEMMs (training.dtype = "float32", GemmMath::fp32): the backends then differ only
//   in summation order (cuBLAS's and OpenBLAS's tilings, other reduction trees) and in the
//   last bits of exp, log and tanh, the kind of difference layouts have among themselves on
//   the CPU (test_train.cpp allows 2e-5); 1e-4 leaves five times that for the functions.
// - bfloat16 (training.dtype = "bfloat16": GemmMath::bf16 and bf16 activations): every
//   stored activation and GEMM input (and attention's probabilities, attention_bf16.hpp) is
//   rounded to 8 significant bits (relative error up to 2^-9, 0.2%), math in float32. The
//   loss, a mean over 384 tokens of log-softmaxes of such GEMMs, moves by a fraction of that,
//   and AdamW's per-element normalized updates carry it over 5 steps without amplifying it
//   much: 2e-2 (0.4% of the loss) is twice the per-input bound.
// Each test prints the largest difference it measured ("[ measured ]"), so a GPU run shows
// how much room each bound leaves.
#include <gtest/gtest.h>

#include <iostream>
#include <regex>

#include "comm/cuda_device.hpp"
#include "cuda_skip.hpp"
#include "layout/layout.hpp"
#include "train_helpers.hpp"

namespace axonn::test {
namespace {

constexpr double kFp32LossTolerance = 1e-4;
constexpr float kFp32WeightTolerance = 1e-4f;  // weights move ~1e-2 per step: 1% of one update
constexpr double kBf16LossTolerance = 2e-2;

const std::string kCpu = "training.device=cpu";
const std::string kCudaFp32 = "training.device=cuda training.dtype=float32";
const std::string kCudaBf16 = "training.device=cuda training.dtype=bfloat16";

// The tiny job trained in `dir` by `ranks` ranks at `layout`, with `overrides` (device, dtype).
TrainedRun train(const std::filesystem::path& dir, const std::string& overrides, int steps, int interval, int ranks = 1,
                 const std::string& layout = "1x1x1x1") {
  return train_in(dir, tiny_job(steps, interval), ranks, layout, overrides, 1, 300);
}

// The largest loss difference between two runs of the same steps (which must match in
// number, step and data cursor), printed with `what`.
double loss_drift(const std::vector<StepLine>& got, const std::vector<StepLine>& want, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    EXPECT_EQ(got[i].step, want[i].step) << what;
    EXPECT_EQ(got[i].data_cursor, want[i].data_cursor) << what;
    worst = std::max(worst, std::fabs(got[i].loss - want[i].loss));
  }
  std::cout << "[ measured ] " << what << ": largest loss difference " << worst << "\n";
  return worst;
}

std::vector<StepLine> from_step(const std::vector<StepLine>& steps, size_t first) {
  return {steps.begin() + static_cast<std::ptrdiff_t>(std::min(first, steps.size())), steps.end()};
}

class TrainGpu : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("gpu"); }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  // The CPU run of 5 steps every comparison here starts from, trained once per process.
  const TrainedRun& cpu_reference() {
    static const TrainedRun run = train(dir_ / "cpu", kCpu, 5, 0);
    return run;
  }
  std::filesystem::path dir_;
};

TEST_F(TrainGpu, Float32GemmsTrainLikeTheCpu) {
  REQUIRE_CUDA_DEVICES(1);
  const TrainedRun& cpu = cpu_reference();
  ASSERT_EQ(cpu.steps.size(), 5u);
  const TrainedRun gpu = train(dir_ / "cuda-fp32", kCudaFp32, 5, 0);
  EXPECT_TRUE(contains(gpu.output, "backend cuda (GPU 0 of ")) << gpu.output;
  EXPECT_TRUE(contains(gpu.output, ", GEMMs fp32, activations float32), collectives nccl")) << gpu.output;
  EXPECT_LE(loss_drift(gpu.steps, cpu.steps, "cuda fp32 vs cpu"), kFp32LossTolerance);
  expect_same_tensors(gpu.tensors, cpu.tensors, kFp32WeightTolerance, "cuda fp32 vs cpu, weights after 5 steps");
  EXPECT_TRUE(contains(gpu.summary, "\"comm_bytes_match\": true")) << gpu.summary;
}

TEST_F(TrainGpu, Bfloat16GemmsTrackTheCpuWithinBfloat16Rounding) {
  REQUIRE_CUDA_DEVICES(1);
  const TrainedRun& cpu = cpu_reference();
  ASSERT_EQ(cpu.steps.size(), 5u);
  const TrainedRun fp32 = train(dir_ / "cuda-fp32", kCudaFp32, 5, 0);
  const TrainedRun bf16 = train(dir_ / "cuda-bf16", kCudaBf16, 5, 0);
  EXPECT_TRUE(contains(bf16.output, ", GEMMs bf16, activations bfloat16), collectives nccl")) << bf16.output;
  const double bf16_drift = loss_drift(bf16.steps, cpu.steps, "cuda bf16 vs cpu");
  EXPECT_LE(bf16_drift, kBf16LossTolerance);
  // bf16 rounding is visible: a run that equals the float32 one did not round its GEMMs.
  EXPECT_GT(bf16_drift, loss_drift(fp32.steps, cpu.steps, "cuda fp32 vs cpu"));
  ASSERT_FALSE(bf16.steps.empty());
  EXPECT_LT(bf16.steps.back().loss, bf16.steps.front().loss) << "the tiny model should learn in 5 steps";
  EXPECT_TRUE(contains(bf16.summary, "\"comm_bytes_match\": true")) << bf16.summary;
}

// A traced step on the GPU (docs/observability.md): the ops on the "device stream" track,
// timed by CUDA events, the same losses as an untraced run (tracing changes no arithmetic),
// and the file passes the same checks as a CPU rank's (tests/trace_check.py).
TEST_F(TrainGpu, TracedStepsPutTheDeviceOpsOnTheStreamTrack) {
  REQUIRE_CUDA_DEVICES(1);
  const TrainedRun plain = train(dir_ / "plain", kCudaFp32, 4, 0);
  const TrainedRun traced = train(dir_ / "traced", kCudaFp32 + " --trace-steps 2-3", 4, 0);
  EXPECT_LE(loss_drift(traced.steps, plain.steps, "traced against untraced"), kFp32LossTolerance);
  const std::string trace = read_text(dir_ / "traced" / "run" / "trace" / "rank-00000.json");
  EXPECT_TRUE(contains(trace, "\"args\": {\"name\": \"device stream\"}")) << trace.substr(0, 2000);
  EXPECT_TRUE(contains(trace, "\"cat\": \"op\"")) << trace.substr(0, 2000);
  const CommandResult check = run_command("/usr/bin/python3 " + std::string(kSourceDir) + "/tests/trace_check.py " +
                                              (dir_ / "traced" / "run").string() + " 1 2 3",
                                          120);
  EXPECT_EQ(check.code, 0) << check.output;
}

TEST_F(TrainGpu, AutoPicksTheGpuAndSaysWhy) {
  REQUIRE_CUDA_DEVICES(1);
  const TrainedRun run = train(dir_ / "auto", "training.device=auto", 2, 0);
  EXPECT_TRUE(contains(run.output, "device: training.device = \"auto\": ")) << run.output;
  EXPECT_TRUE(contains(run.output, " CUDA device(s) visible")) << run.output;
  EXPECT_TRUE(contains(run.output, "rank 0 on ")) << run.output;
  EXPECT_TRUE(contains(run.output, "backend cuda (GPU 0 of ")) << run.output;
}

// With no site config named, a GPU job is priced on the GPU it runs on (local_gpu_site.hpp),
// not on the built-in CPU site: its MFU is against the GPU's peak (the tiny job on an H100
// showed "MFU 810%" against the CPU's 40 GFLOP/s), and its prediction is the GPU's.
TEST_F(TrainGpu, WithNoSiteNamedTheGpuItRunsOnIsTheSite) {
  REQUIRE_CUDA_DEVICES(1);
  const TrainedRun run = train(dir_ / "local-gpu", kCudaBf16, 2, 0);
  EXPECT_TRUE(contains(run.output, "site local-gpu, described from this machine's ")) << run.output;
  EXPECT_TRUE(contains(run.output, " SMs at ")) << run.output;
  const std::regex mfu_re(R"("mfu": ([-0-9.eE+]+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.summary, m, mfu_re)) << run.summary;
  EXPECT_LT(std::stod(m[1]), 1.0) << "MFU above 100%: not priced on the GPU\n" << run.output;
}

// Checkpoints hold float32 tensors whichever backend wrote them: a run saved at step 3 on
// one backend continues on the other like the uninterrupted CPU run.
TEST_F(TrainGpu, ACheckpointSavedOnTheGpuResumesOnTheCpuAndOneSavedOnTheCpuOnTheGpu) {
  REQUIRE_CUDA_DEVICES(1);
  const TrainedRun cpu_full = train(dir_ / "cpu-full", kCpu, 6, 3);
  ASSERT_EQ(cpu_full.steps.size(), 6u);
  const std::vector<StepLine> want = from_step(cpu_full.steps, 3);  // steps 4-6
  train(dir_ / "cuda-full", kCudaFp32, 6, 3);

  const TrainedRun on_cpu = train(copy_checkpoint_step(dir_ / "cuda-full", 3, dir_ / "cuda-to-cpu"), kCpu, 6, 3);
  EXPECT_TRUE(contains(on_cpu.summary, "\"start_step\": 3")) << on_cpu.summary;
  EXPECT_LE(loss_drift(on_cpu.steps, want, "saved on cuda, resumed on cpu"), kFp32LossTolerance);
  expect_same_tensors(on_cpu.tensors, cpu_full.tensors, kFp32WeightTolerance, "saved on cuda, resumed on cpu");

  const TrainedRun on_gpu = train(copy_checkpoint_step(dir_ / "cpu-full", 3, dir_ / "cpu-to-cuda"), kCudaFp32, 6, 3);
  EXPECT_TRUE(contains(on_gpu.summary, "\"start_step\": 3")) << on_gpu.summary;
  EXPECT_LE(loss_drift(on_gpu.steps, want, "saved on cpu, resumed on cuda"), kFp32LossTolerance);
  expect_same_tensors(on_gpu.tensors, cpu_full.tensors, kFp32WeightTolerance, "saved on cpu, resumed on cuda");
}

// Every collective of the model runs on NCCL between the CUDA kernels around it (the grid
// orders them against the compute stream): each layout of 2, 4 and 8 ranks, one GPU each,
// trains like the CPU, and counts the layout model's bytes. Layouts beyond the GPUs there
// are skipped, saying so.
TEST_F(TrainGpu, EveryLayoutOnOneGpuPerRankTrainsLikeTheCpu) {
  REQUIRE_CUDA_DEVICES(2);
  const int gpus = cuda_device_count();
  const TrainedRun& cpu = cpu_reference();
  ASSERT_EQ(cpu.steps.size(), 5u);
  for (const char* layout :
       {"2x1x1x1", "1x2x1x1", "1x1x2x1", "1x1x1x2", "1x2x2x1", "2x1x1x2", "1x2x1x2:zyxd", "2x2x1x2", "1x2x2x2"}) {
    const Layout parsed = parse_layout(layout);
    if (parsed.world() > gpus) {
      std::cout << "[ skipped  ] " << layout << ": " << parsed.world() << " ranks, " << gpus << " GPUs\n";
      continue;
    }
    std::string name = layout;
    for (char& c : name)
      if (c == ':') c = '_';
    const TrainedRun run = train(dir_ / name, kCudaFp32, 5, 0, parsed.world(), layout);
    EXPECT_LE(loss_drift(run.steps, cpu.steps, std::string("cuda fp32 at ") + layout + " vs cpu"), kFp32LossTolerance);
    expect_same_tensors(run.tensors, cpu.tensors, kFp32WeightTolerance, std::string("cuda fp32 at ") + layout);
    EXPECT_TRUE(contains(run.summary, "\"comm_bytes_match\": true")) << layout << "\n" << run.summary;
    EXPECT_TRUE(contains(run.output, "rank 1 on ")) << run.output;
    EXPECT_TRUE(contains(run.output, "backend cuda (GPU 1 of ")) << run.output;
  }
}

// training.recompute on GPUs: the rerun kernels read what the forward's read (bf16
// activations as stored), so every mode trains to the bits of the run that keeps everything,
// losses and weights, and counts the layout model's bytes. Three layers (model.layers=3), so
// under block recomputation blocks 0 and 2 share a set of gathered weights. One GPU in float32
// and bfloat16; then layouts of 2, 4 and 8 ranks as far as the GPUs go (skipped beyond).
TEST_F(TrainGpu, EveryRecomputeModeTrainsToTheBitsOfNoRecomputation) {
  REQUIRE_CUDA_DEVICES(1);
  const auto expect_same_bits = [](const TrainedRun& got, const TrainedRun& want, const std::string& what) {
    ASSERT_EQ(got.steps.size(), want.steps.size()) << what;
    for (size_t i = 0; i < want.steps.size(); ++i)
      EXPECT_EQ(got.steps[i].loss, want.steps[i].loss) << what << " step " << want.steps[i].step;
    expect_same_tensors(got.tensors, want.tensors, 0.0f, what);
    EXPECT_TRUE(contains(got.summary, "\"comm_bytes_match\": true")) << what << "\n" << got.summary;
  };
  const auto trained = [&](const std::string& name, const std::string& overrides, const std::string& mode,
                           int ranks = 1, const std::string& layout = "1x1x1x1") {
    const TrainedRun run = train(dir_ / (name + "-" + mode), overrides + " model.layers=3 training.recompute=" + mode,
                                 2, 0, ranks, layout);
    EXPECT_TRUE(contains(run.summary, "\"recompute\": \"" + mode + "\"")) << run.summary;
    return run;
  };
  for (const auto& [name, overrides] : {std::pair{"fp32", kCudaFp32}, std::pair{"bf16", kCudaBf16}}) {
    const TrainedRun kept = trained(name, overrides, "none");
    ASSERT_EQ(kept.steps.size(), 2u);
    for (const char* mode : {"attention", "block"})
      expect_same_bits(trained(name, overrides, mode), kept, std::string(name) + " recompute " + mode);
  }
  const int gpus = cuda_device_count();
  for (const char* layout : {"1x1x1x2", "1x2x1x2", "2x1x2x2"}) {
    const int ranks = parse_layout(layout).world();
    if (ranks > gpus) {
      std::cout << "[ skipped  ] " << layout << ": " << ranks << " ranks, " << gpus << " GPUs\n";
      continue;
    }
    const TrainedRun kept = trained(layout, kCudaFp32, "none", ranks, layout);
    for (const char* mode : {"attention", "block"})
      expect_same_bits(trained(layout, kCudaFp32, mode, ranks, layout), kept,
                       std::string(layout) + " recompute " + mode);
  }
}

// training.shard_optimizer on GPUs: NCCL's reduce-scatter and all-reduce both add two terms
// once at G_data = 2 (the same bits), so without clipping the sharded optimizer trains 3 steps
// to the unsharded run's losses and weights, in float32 and in bfloat16 (the master weights
// sharded, the all-gather moving the bf16 copy), and counts the layout model's bytes; at
// G_data = 4 NCCL's orders may differ, within the float32 bound of docs/parallel-plan.md
// ("Optimizer sharding"), test_train's 2e-5 on the losses here. A checkpoint saved sharded in
// bfloat16 resumes unsharded and continues as the uninterrupted unsharded run. Needs 2 (then
// 4) GPUs; skipped, saying so, beyond what the machine has.
TEST_F(TrainGpu, ShardedOptimizerTrainsToTheBitsOfTheUnshardedOne) {
  REQUIRE_CUDA_DEVICES(2);
  const std::string no_clip = " training.grad_clip=0";
  const auto trained = [&](const std::string& name, const std::string& overrides, bool shard, int steps, int interval,
                           const std::string& layout) {
    const TrainedRun run = train(dir_ / (name + (shard ? "-sharded" : "-whole")),
                                 overrides + no_clip + " training.shard_optimizer=" + (shard ? "true" : "false"), steps,
                                 interval, parse_layout(layout).world(), layout);
    EXPECT_TRUE(contains(run.summary, std::string("\"shard_optimizer\": ") + (shard ? "true" : "false")))
        << run.summary;
    EXPECT_TRUE(contains(run.summary, "\"comm_bytes_match\": true")) << name << "\n" << run.summary;
    return run;
  };
  for (const auto& [name, overrides] : {std::pair{"fp32", kCudaFp32}, std::pair{"bf16", kCudaBf16}}) {
    const TrainedRun whole = trained(name, overrides, false, 3, 0, "2x1x1x1");
    const TrainedRun sharded = trained(name, overrides, true, 3, 0, "2x1x1x1");
    ASSERT_EQ(sharded.steps.size(), whole.steps.size()) << name;
    for (size_t i = 0; i < whole.steps.size(); ++i)
      EXPECT_EQ(sharded.steps[i].loss, whole.steps[i].loss) << name << " step " << whole.steps[i].step;
    expect_same_tensors(sharded.tensors, whole.tensors, 0.0f, std::string(name) + " sharded at 2x1x1x1");
  }
  // bfloat16, saved sharded at step 3 of 6, resumed unsharded.
  const TrainedRun whole = trained("bf16-6", kCudaBf16, false, 6, 3, "2x1x1x1");
  trained("bf16-6", kCudaBf16, true, 6, 3, "2x1x1x1");
  copy_checkpoint_step(dir_ / "bf16-6-sharded", 3, dir_ / "bf16-resumed-whole");  // where trained() runs it
  const TrainedRun resumed = trained("bf16-resumed", kCudaBf16, false, 6, 3, "2x1x1x1");
  EXPECT_TRUE(contains(resumed.summary, "\"start_step\": 3")) << resumed.summary;
  loss_drift(resumed.steps, from_step(whole.steps, 3), "bf16 saved sharded, resumed unsharded");
  for (size_t i = 0; i < resumed.steps.size() && i + 3 < whole.steps.size(); ++i)
    EXPECT_EQ(resumed.steps[i].loss, whole.steps[i + 3].loss) << "resumed step " << resumed.steps[i].step;
  if (cuda_device_count() < 4) {
    std::cout << "[ skipped  ] 4x1x1x1: 4 ranks, " << cuda_device_count() << " GPUs\n";
    return;
  }
  const TrainedRun four_whole = trained("fp32-4", kCudaFp32, false, 3, 0, "4x1x1x1");
  const TrainedRun four_sharded = trained("fp32-4", kCudaFp32, true, 3, 0, "4x1x1x1");
  EXPECT_LE(loss_drift(four_sharded.steps, four_whole.steps, "fp32 sharded at 4x1x1x1"), 2e-5);
}

TEST_F(TrainGpu, MoreRanksOnANodeThanGpusIsABadInputNamingTheFix) {
  REQUIRE_CUDA_DEVICES(1);
  const int ranks = cuda_device_count() + 1;
  write_file(dir_ / "job.toml", tiny_job(2, 0));
  const CommandResult r = run_train(dir_, ranks, "", kCudaFp32);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, std::to_string(ranks) + " ranks on ")) << r.output;
  EXPECT_TRUE(contains(r.output, "NCCL needs one GPU per rank")) << r.output;
  EXPECT_TRUE(contains(r.output, "set training.device = \"cpu\"")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "run" / "metrics.jsonl")) << "nothing may start";
}

}  // namespace
}  // namespace axonn::test
