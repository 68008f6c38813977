// Training throughput of the CUDA trainer on one GPU (GPU 0, one rank), GPT-2 124M and 350M
// (and with --model llama-1b, Llama 3.2 1B's shape) at T = 1024 in mixed precision as training.dtype = "bfloat16" runs
// it (bf16 activations and GEMM weights, bf16 tensor cores, float32 accumulation, master weights and AdamW; with
// --float32-activations: float32 storage, GEMM inputs rounded to bf16 inside cuBLASLt),
// against references measured in the same run:
//   1. the GPU's dense bf16 peak, 989 TFLOP/s for an H100 SXM (site_configs/dgx-h100.toml):
//      goal MFU >= 50% at 350M (llm.c reaches ~46% at 1.5B on an H100);
//   2. the backend's own GEMM (Backend::gemm, cuBLASLt through trainer/cuda/gemm.cpp) at
//      --gemm N cubed on the step's activation type: the rate a step made only of GEMMs
//      would reach;
//   3. PyTorch training the same model with the same step (bench/train_gpu_torch.py: SDPA
//      flash attention, bf16 autocast, torch.compile, fused AdamW), goal ours/PyTorch >= 1.1x;
//      it also times a native bf16 torch.matmul of the same size, printed beside (2).
// FLOPs per step are the layout model's (layout_cost.cpp flops_per_rank, the number the
// trainer's MFU log uses: 6·tokens·k·n per linear layer incl. the tied head, 12·B·H·T²·d for
// attention), the same for both sides, so FLOP/s ratios equal tokens/s ratios.
//
// usage: bench_train_gpu [--model 124m|350m|both|llama-1b|tiny|llama-tiny] [--micro-batch mb] [--batch B]
//                        [--warmup N]
//                        [--steps M] [--gemm N] [--python PATH] [--no-torch] [--profile]
//                        [--float32-activations] [--gemm-candidates N]
// --gemm-candidates N: cuBLASLt algorithms timed per GEMM shape, the fastest kept (CudaBackendOptions).
// --profile: no references; our step's time per backend op (GEMMs per shape, attention,
// LayerNorm, ...; op_profile.hpp), each op synchronized, for each model.
// Each step is --batch sequences in micro-batches of --micro-batch (default 8 and 8: one
// micro-batch per step). Our side is in-process: the CUDA backend on GPU 0, a one-rank
// CommGrid on NCCL (as `axonn train` builds it), Trainer on the built-in corpus. Without a
// CUDA device it says so in one line and exits 0: there is nothing to measure.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "comm/comm_grid.hpp"
#include "config/job_config.hpp"
#include "layout/layout_cost.hpp"
#include "op_profile.hpp"
#include "solo_trainer.hpp"
#include "trainer/cuda/cuda_backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/train/trainer.hpp"

#ifndef AXONN_SOURCE_DIR
#error "AXONN_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif

using namespace axonn;
using namespace axonn::bench;

namespace {

constexpr double kPeakBf16Flops = 989e12;  // H100 SXM dense bf16 (site_configs/dgx-h100.toml)
constexpr double kMfuGoal = 0.50;          // at 350M
constexpr double kTorchGoal = 1.1;

struct Model {
  const char* name;
  ModelShape shape;
};

// GPT-2 small and medium, vocabulary 50257 padded to a multiple of 128 (job_templates/gpt2-124m.toml).
const Model kGpt2Small{"124m", {12, 768, 12, 50304, 1024}};
const Model kGpt2Medium{"350m", {24, 1024, 16, 50304, 1024}};
// Llama 3.2 1B (1.24B parameters: 16 layers, hidden 2048, 32 query heads sharing 8 key/value
// heads, SwiGLU of 8192, RoPE theta 500000, head tied to the embedding, vocabulary 128256) at
// T = 1024: the Llama family's kernels (RMSNorm, SwiGLU, RoPE, grouped-query attention) at a
// size where they run as in training.
ModelShape llama_shape(int layers, int hidden, int heads, int kv_heads, int mlp_hidden, int vocab, int sequence) {
  ModelShape m{layers, hidden, heads, vocab, sequence};
  m.norm = Norm::rmsnorm;
  m.mlp = Mlp::swiglu;
  m.mlp_hidden = mlp_hidden;
  m.positions = Positions::rope;
  m.rope_theta = 500000.0;
  m.kv_heads = kv_heads;
  m.bias = false;
  return m;
}
const Model kLlama1b{"llama-1b", llama_shape(16, 2048, 32, 8, 8192, 128256, 1024)};
// Smoke tests of this program (seconds), not measurements.
const Model kTiny{"tiny", {2, 64, 2, 256, 64}};
const Model kLlamaTiny{"llama-tiny", llama_shape(2, 64, 4, 2, 96, 256, 64)};

struct Options {
  std::vector<Model> models{kGpt2Small, kGpt2Medium};
  int batch = 8;
  int micro_batch = 8;
  int warmup = 3;
  int steps = 10;
  int gemm = 8192;
  int gemm_candidates = 1;
  std::string python = "python3";
  bool torch = true;
  bool profile = false;
  ElementType activations = ElementType::bfloat16;
};

// FLOP/s of the backend's GEMM at n^3 (row-major, no transposes, buffers of the backend's
// activation type, its math), over 10 calls after 3 untimed ones; inputs from a hash, not
// constants, since tensor cores draw less power (and may clock higher) on zeros and repeated
// values.
double backend_gemm_flops(Backend& backend, int n) {
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> host(count);
  uint32_t x = 12345;
  for (float& h : host) {
    x = x * 1664525u + 1013904223u;
    h = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;  // [-0.5, 0.5)
  }
  const ElementType type = backend.activation_type();
  const DeviceBuffer<float> values(backend, host);
  DeviceBuffer<std::byte> a_bytes(backend, count * element_size(type)), b_bytes(backend, count * element_size(type)),
      c_bytes(backend, count * element_size(type));
  const ActPtr a(a_bytes.data(), type), b(b_bytes.data(), type), c(c_bytes.data(), type);
  backend.convert(a, values.data(), static_cast<int64_t>(count));
  backend.convert(b, values.data(), static_cast<int64_t>(count));
  auto run = [&] { backend.gemm(Transpose::no, Transpose::no, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); };
  for (int i = 0; i < 3; ++i) run();
  backend.synchronize();
  const int calls = 10;
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) run();
  backend.synchronize();
  const double seconds = seconds_since(start);
  return 2.0 * n * static_cast<double>(n) * n * calls / seconds;
}

JobConfig bench_job(const Options& o, const ModelShape& shape) {
  JobConfig job = bench_train_job("bench_train_gpu", shape, o.batch, o.micro_batch);
  job.training.dtype = ElementType::bfloat16;
  job.training.device = "cuda";
  return job;
}

// Our step split by backend op, on a TimedBackend around `backend`.
void our_profile(Backend& backend, const Options& o, const Model& model, const std::shared_ptr<const TokenData>& data) {
  const JobConfig job = bench_job(o, model.shape);
  TimedBackend timed(backend);
  SoloExchange exchange;
  CommGrid grid(exchange, Layout{}, std::chrono::seconds(60), true, CommBackend::nccl);
  grid.order_with_compute(cuda_stream_of(backend));
  Trainer trainer(timed.backend(), grid, job, DataMixture::single(data, job.training.seed, job.model.sequence));
  std::printf("%s, %d sequences in micro-batches of %d: ", model.name, o.batch, trainer.split().micro_batch);
  print_op_profile(timed, trainer, o.steps, [&] {
    backend.synchronize();
    grid.synchronize();
  });
  std::printf("\n");
}

struct OurRun {
  double params = 0;
  int micro_batch = 0;
  double step_s = 0;  // median of the timed steps
};

// Our trainer on `backend`: --warmup untimed steps, then the median of --steps timed ones,
// each ending when the GPU and NCCL are done. The trainer's buffers are freed on return.
OurRun our_run(Backend& backend, const Options& o, const ModelShape& shape, const std::shared_ptr<const TokenData>& data) {
  const JobConfig job = bench_job(o, shape);
  SoloExchange exchange;
  CommGrid grid(exchange, Layout{}, std::chrono::seconds(60), true, CommBackend::nccl);
  grid.order_with_compute(cuda_stream_of(backend));
  Trainer trainer(backend, grid, job, DataMixture::single(data, job.training.seed, job.model.sequence));
  std::vector<double> times;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const auto start = Clock::now();
    trainer.train_step();
    backend.synchronize();
    grid.synchronize();
    if (s >= o.warmup) times.push_back(seconds_since(start));
  }
  return {static_cast<double>(trainer.params().size()), trainer.split().micro_batch, median(times)};
}

// The number after `"key": ` in `json`, if there is one.
std::optional<double> json_number(const std::string& json, const std::string& key) {
  const size_t at = json.rfind("\"" + key + "\": ");
  if (at == std::string::npos) return std::nullopt;
  const char* p = json.c_str() + at + key.size() + 4;
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  if (end == p) return std::nullopt;
  return v;
}

struct TorchRun {
  double tokens_per_s = 0;
  std::optional<double> matmul_flops;
};

// Runs the PyTorch side for `shape` and parses its last line; throws with its output on failure.
TorchRun torch_run(const Options& o, const ModelShape& m, bool matmul) {
  const char* source = std::getenv("AXONN_SOURCE_DIR");  // a copied build (scripts/gpu_bundle.sh)
  const std::string script =
      std::string(source != nullptr && *source != '\0' ? source : AXONN_SOURCE_DIR) + "/bench/train_gpu_torch.py";
  // In a bundle (scripts/gpu_bundle.sh) LD_LIBRARY_PATH starts with the bundle's copies of
  // Debian's libraries; PyTorch gets the path as it was before env.sh.
  const char* python_path = std::getenv("AXONN_PYTHON_LD_LIBRARY_PATH");
  const std::string env = python_path != nullptr ? "env LD_LIBRARY_PATH='" + std::string(python_path) + "' " : "";
  const std::string command = env + o.python + " " + script + torch_model_flags(m, o.batch, o.micro_batch) +
                              " --warmup " + std::to_string(o.warmup) + " --steps " + std::to_string(o.steps) +
                              (matmul ? " --matmul " + std::to_string(o.gemm) : "") + " 2>&1";
  int status = 0;
  const std::string output = run_capture(command, status);
  const std::optional<double> tokens = json_number(output, "tokens_per_s");
  if (status != 0 || !tokens)
    throw std::runtime_error("PyTorch side failed (" + command + "); --no-torch skips it:\n" + output);
  TorchRun run{*tokens, std::nullopt};
  if (const auto tflops = json_number(output, "matmul_tflops")) run.matmul_flops = *tflops * 1e12;
  return run;
}

const std::vector<OptionSpec> kOptions = {
    {"model", true, "124m, 350m, both (default: GPT-2 124M and 350M), llama-1b, tiny or llama-tiny"},
    {"micro-batch", true, "micro-batch mb (default 8)"},
    {"batch", true, "global batch B, a multiple of mb (default 8)"},
    {"warmup", true, "untimed steps before the timed ones (default 3)"},
    {"steps", true, "timed steps (default 10)"},
    {"gemm", true, "n of the n^3 GEMM rate measured on both sides (default 8192)"},
    {"gemm-candidates", true,
     "cuBLASLt algorithms timed per GEMM shape, the fastest kept (default 1: the heuristic's)"},
    {"python", true, "the Python that runs bench/train_gpu_torch.py (default python3)"},
    {"no-torch", false, "skip the PyTorch side"},
    {"profile", false, "no references: our step's time per backend op"},
    {"float32-activations", false, "activations in float32 instead of bfloat16"},
    {"help", false, "this help"},
};

Options read_options(const Args& args) {
  no_positionals(args);
  Options o;
  o.torch = !args.has("no-torch");
  o.profile = args.has("profile");
  if (args.has("float32-activations")) o.activations = ElementType::float32;
  const std::string model = args.value("model").value_or("both");
  if (model == "124m")
    o.models = {kGpt2Small};
  else if (model == "350m")
    o.models = {kGpt2Medium};
  else if (model == "llama-1b")
    o.models = {kLlama1b};
  else if (model == "tiny")
    o.models = {kTiny};
  else if (model == "llama-tiny")
    o.models = {kLlamaTiny};
  else if (model != "both")
    throw UsageError("option '--model' must be 124m, 350m, both, llama-1b, tiny or llama-tiny, got '" + model + "'");
  o.micro_batch = count_option(args, "micro-batch", o.micro_batch);
  o.batch = count_option(args, "batch", o.batch);
  if (o.batch % o.micro_batch != 0)
    throw UsageError("--batch " + std::to_string(o.batch) + " is not a multiple of --micro-batch " +
                     std::to_string(o.micro_batch));
  o.warmup = static_cast<int>(args.integer("warmup", 0, 1 << 30).value_or(o.warmup));
  o.steps = count_option(args, "steps", o.steps);
  o.gemm = count_option(args, "gemm", o.gemm);
  o.gemm_candidates = count_option(args, "gemm-candidates", o.gemm_candidates);
  o.python = args.value("python").value_or(o.python);
  return o;
}

const char* verdict(bool met) { return met ? "met" : "MISSED"; }

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_bench_args(argc, argv, kOptions, "bench_train_gpu [options]", read_options);
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("bench_train_gpu: no CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  select_cuda_device(0, 1);
  CudaBackendOptions backend_options;
  backend_options.device = 0;
  backend_options.gemm_math = GemmMath::bf16;
  backend_options.activations = o.activations;
  backend_options.gemm_candidates = o.gemm_candidates;
  const std::unique_ptr<Backend> backend = make_cuda_backend(backend_options);
  const auto data = std::make_shared<const TokenData>(builtin_corpus());
  if (o.profile) {
    for (const Model& model : o.models) {
      data->validate(model.shape.vocab, model.shape.sequence, o.batch);
      our_profile(*backend, o, model, data);
    }
    return 0;
  }

  const double gemm_flops = backend_gemm_flops(*backend, o.gemm);
  std::printf(
      "GPU 0, GEMMs %s, activations %s; backend gemm %d^3: %.1f TFLOP/s (%.1f%% of the %.0f TFLOP/s bf16 peak)\n",
      gemm_math_name(backend_options.gemm_math), element_type_name(o.activations), o.gemm, gemm_flops / 1e12,
      100.0 * gemm_flops / kPeakBf16Flops, kPeakBf16Flops / 1e12);
  std::printf("step: %d sequences in micro-batches of %d, AdamW + clipping; %d untimed + %d timed steps (median)\n\n",
              o.batch, o.micro_batch, o.warmup, o.steps);
  std::printf("%10s %8s %11s %10s %9s %10s %12s %11s\n", "model", "params", "ours tok/s", "ours TF/s", "MFU peak",
              "MFU gemm", "torch tok/s", "ours/torch");

  std::optional<double> torch_matmul;
  bool mfu_goal = true, torch_goal = true;
  for (const Model& model : o.models) {
    const ModelShape& m = model.shape;
    data->validate(m.vocab, m.sequence, o.batch);
    const OurRun ours = our_run(*backend, o, m, data);
    ChooserInput plan;
    plan.model = m;
    plan.batch = {o.batch, o.micro_batch, ElementType::float32};  // as train_command.cpp: flops need no dtype
    const double flops = flops_per_rank(plan, Layout{});
    const double tokens = static_cast<double>(o.batch) * m.sequence;
    const double our_flops = flops / ours.step_s;
    std::printf("%10s %7.0fM %11.0f %10.1f %8.1f%% %9.1f%%", model.name, ours.params / 1e6, tokens / ours.step_s,
                our_flops / 1e12, 100.0 * our_flops / kPeakBf16Flops, 100.0 * our_flops / gemm_flops);
    if (std::string(model.name) == kGpt2Medium.name) mfu_goal = our_flops / kPeakBf16Flops >= kMfuGoal;
    if (o.torch) {
      const TorchRun torch = torch_run(o, m, !torch_matmul.has_value());
      if (torch.matmul_flops) torch_matmul = torch.matmul_flops;
      const double ratio = tokens / ours.step_s / torch.tokens_per_s;
      torch_goal = torch_goal && ratio >= kTorchGoal;
      std::printf(" %12.0f %10.2fx\n", torch.tokens_per_s, ratio);
    } else {
      std::printf(" %12s %11s\n", "-", "-");
    }
    std::fflush(stdout);
  }

  std::printf("\n");
  if (torch_matmul)
    std::printf("PyTorch bf16 matmul %d^3: %.1f TFLOP/s (ours, float32 buffers with bf16 math: %.1f)\n", o.gemm,
                *torch_matmul / 1e12, gemm_flops / 1e12);
  const bool has_350m = std::any_of(o.models.begin(), o.models.end(),
                                    [](const Model& m) { return std::string(m.name) == kGpt2Medium.name; });
  if (has_350m) std::printf("goal MFU >= %.0f%% at 350M: %s\n", 100.0 * kMfuGoal, verdict(mfu_goal));
  if (o.torch) std::printf("goal ours/PyTorch >= %.1fx: %s\n", kTorchGoal, verdict(torch_goal));
  return 0;
} catch (const std::exception& e) {
  const bool memory = std::string(e.what()).find("cudaMalloc") != std::string::npos;
  std::fprintf(stderr, "bench_train_gpu: %s%s\n", e.what(), memory ? " (a smaller --micro-batch needs less)" : "");
  return 1;
}
