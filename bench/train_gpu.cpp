// Training throughput of the CUDA trainer on one GPU (GPU 0, one rank): GPT-2 124M and 350M by
// default, 1.5B and Llama 3.2 1B's shape by name (--model, bench/gpu_models.hpp), at T = 1024
// in mixed precision as training.dtype = "bfloat16" runs it (bf16 activations and GEMM
// weights, bf16 tensor cores, float32 accumulation, master weights and AdamW; with
// --float32-activations: float32 storage, GEMM inputs rounded to bf16 inside cuBLASLt), with
// activation recomputation as the chooser picks it for this GPU's memory (--recompute to
// name one), against references measured in the same run:
//   1. the GPU's dense bf16 peak, 989 TFLOP/s for an H100 SXM (site_configs/dgx-h100.toml):
//      goal MFU >= 50% at 350M (llm.c reaches ~46% at 1.5B on an H100);
//   2. the backend's own GEMM (Backend::gemm, cuBLASLt through trainer/cuda/gemm.cpp) at
//      --gemm N cubed on the step's activation type: the rate a step made only of GEMMs
//      would reach;
//   3. PyTorch training the same model with the same step (bench/train_gpu_torch.py: SDPA
//      flash attention, bf16 autocast, torch.compile, fused AdamW; with our recomputation
//      mirrored by activation checkpointing), goal ours/PyTorch >= 1.1x; it also times a
//      native bf16 torch.matmul of the same size, printed beside (2).
// Each model runs --rounds times on each side, alternating (ours, PyTorch, ours, ...), since
// PyTorch's rate has varied by half between calls; the table gives the medians and the ratio
// of the medians. FLOPs per step are the layout model's (layout_cost.cpp flops_per_rank, the
// number the trainer's MFU log uses: 6·tokens·k·n per linear layer incl. the head,
// 12·B·H·T²·d for attention), the same for both sides, so FLOP/s ratios equal tokens/s ratios;
// recomputed forwards are not counted (MFU, not hardware FLOP/s).
//
// usage: bench_train_gpu [--model NAMES] [--micro-batch mb] [--batch B] [--recompute MODE]
//                        [--rounds R] [--warmup N] [--steps M] [--gemm N] [--python PATH]
//                        [--no-torch] [--profile] [--float32-activations] [--gemm-candidates N]
//                        [--json PATH]
//        bench_train_gpu --fit [--model NAMES] [--max-micro-batch N] [--max-sequence N]
//                        [--python PATH] [--no-torch]
// --model: a comma-separated list of 124m, 350m, 1.5b, llama-1b, tiny, llama-tiny; both
// (the default) is 124m,350m.
// --gemm-candidates N: cuBLASLt algorithms timed per GEMM shape, the fastest kept (CudaBackendOptions).
// --json PATH: the medians also as JSON, rewritten after each model (bench/results/train_gpu.json's format: device,
// date, commit, command, rounds, models [{model, recompute, tokens_per_s, mfu, torch_tokens_per_s, torch_ratio}],
// PyTorch's null with --no-torch); the commit is $AXONN_COMMIT (a bundle's env.sh sets it) or the source tree's `git
// describe`.
// --profile: no references; our step's time per backend op (GEMMs per shape, attention,
// LayerNorm, ...; op_profile.hpp), each op synchronized, for each model.
// --fit: the largest micro-batch and sequence that train, ours against PyTorch
// (train_gpu_fit.hpp); the models default to 350m,1.5b.
// Each step is --batch sequences in micro-batches of --micro-batch (default 8 and 8: one
// micro-batch per step). Our side is in-process: the CUDA backend on GPU 0, a one-rank
// CommGrid on NCCL (as `axonn train` builds it), Trainer on the built-in corpus, built anew
// each round. Without a CUDA device it says so in one line and exits 0: there is nothing to
// measure.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "comm/comm_grid.hpp"
#include "comm/cuda_device.hpp"
#include "config/job_config.hpp"
#include "core/json_text.hpp"
#include "core/wall_clock.hpp"
#include "gpu_models.hpp"
#include "layout/layout_cost.hpp"
#include "op_profile.hpp"
#include "solo_trainer.hpp"
#include "torch_side.hpp"
#include "train_gpu_fit.hpp"
#include "trainer/cuda/cuda_backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/train/trainer.hpp"

using namespace axonn;
using namespace axonn::bench;

namespace {

constexpr double kPeakBf16Flops = 989e12;  // H100 SXM dense bf16 (site_configs/dgx-h100.toml)
constexpr double kMfuGoal = 0.50;          // at 350M
constexpr double kTorchGoal = 1.1;

struct Options {
  std::vector<GpuModel> models = gpu_models_named("both");
  int batch = 8;
  int micro_batch = 8;
  std::optional<Recompute> recompute;  // unset: as the chooser picks it for this GPU
  int rounds = 3;
  int warmup = 3;
  int steps = 10;
  int gemm = 8192;
  int gemm_candidates = 1;
  std::string python = "python3";
  bool torch = true;
  bool profile = false;
  bool fit = false;
  FitOptions fit_options;  // with fit
  ElementType activations = ElementType::bfloat16;
  std::optional<std::string> json;
  std::string command;  // as given, for the JSON
  std::string commit;   // measured_commit(), for the JSON
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

JobConfig bench_job(const Options& o, const ModelShape& shape, Recompute recompute) {
  JobConfig job = bench_train_job("bench_train_gpu", shape, o.batch, o.micro_batch, recompute);
  job.training.dtype = ElementType::bfloat16;
  job.training.device = "cuda";
  return job;
}

// Our step split by backend op, on a TimedBackend around `backend`.
void our_profile(Backend& backend, const Options& o, const GpuModel& model, Recompute recompute,
                 const std::shared_ptr<const TokenData>& data) {
  const JobConfig job = bench_job(o, model.shape, recompute);
  TimedBackend timed(backend);
  SoloExchange exchange;
  CommGrid grid(exchange, Layout{}, std::chrono::seconds(60), true, CommBackend::nccl);
  grid.order_with_compute(cuda_stream_of(backend));
  Trainer trainer(timed.backend(), grid, job, DataMixture::single(data, job.training.seed, job.model.sequence));
  std::printf("%s, %d sequences in micro-batches of %d, recompute %s: ", model.name.c_str(), o.batch,
              trainer.split().micro_batch, recompute_name(recompute));
  print_op_profile(timed, trainer, o.steps, [&] {
    backend.synchronize();
    grid.synchronize();
  });
  std::printf("\n");
}

struct OurRun {
  double params = 0;
  double step_s = 0;  // median of the timed steps
};

// Our trainer on `backend`: --warmup untimed steps, then the median of --steps timed ones,
// each ending when the GPU and NCCL are done. The trainer's buffers are freed on return.
OurRun our_run(Backend& backend, const Options& o, const ModelShape& shape, Recompute recompute,
               const std::shared_ptr<const TokenData>& data) {
  const JobConfig job = bench_job(o, shape, recompute);
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
  return {static_cast<double>(trainer.params().size()), median(times)};
}

struct TorchRun {
  double tokens_per_s = 0;
  std::optional<double> matmul_flops;
};

// Runs the PyTorch side for `shape` once and reads its last line; throws with its output on failure.
TorchRun torch_run(const Options& o, const ModelShape& m, Recompute recompute, bool matmul) {
  const std::string command =
      torch_command(o.python, "train_gpu_torch.py",
                    torch_model_flags(m, o.batch, o.micro_batch) + " --recompute " + recompute_name(recompute) +
                        " --warmup " + std::to_string(o.warmup) + " --steps " + std::to_string(o.steps) +
                        (matmul ? " --matmul " + std::to_string(o.gemm) : ""));
  const std::string output = run_torch_side(command, "tokens_per_s");
  TorchRun run{*json_number(output, "tokens_per_s"), std::nullopt};
  if (const auto tflops = json_number(output, "matmul_tflops")) run.matmul_flops = *tflops * 1e12;
  return run;
}

// One model's medians over the rounds.
struct ModelResult {
  std::string model;
  Recompute recompute = Recompute::none;
  double params = 0;
  double tokens_per_s = 0;
  double flops_per_s = 0;
  std::optional<double> torch_tokens_per_s;
};

// The commit measured: $AXONN_COMMIT (scripts/gpu_bundle.sh's env.sh sets it), else the
// source tree's `git describe --always --dirty`, else "unknown".
std::string measured_commit() {
  if (const char* commit = std::getenv("AXONN_COMMIT"); commit != nullptr && *commit != '\0') return commit;
  int status = 0;
  std::string out = run_capture("git -C '" AXONN_SOURCE_DIR "' describe --always --dirty 2>/dev/null", status);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return status == 0 && !out.empty() ? out : "unknown";
}

// bench/results/train_gpu.json's format (the header comment); a number or null.
void write_json(const std::string& path, const Options& o, const std::string& device,
                const std::vector<ModelResult>& results) {
  const auto number_or_null = [](const std::optional<double>& v) { return v ? json_number(*v) : std::string("null"); };
  std::string s = "{\n  \"device\": " + json_string(device) +
                  ",\n  \"date\": " + json_string(utc_now_text("%Y-%m-%d")) +
                  ",\n  \"commit\": " + json_string(o.commit) + ",\n  \"command\": " + json_string(o.command) +
                  ",\n  \"rounds\": " + std::to_string(o.rounds) + ",\n  \"models\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const ModelResult& r = results[i];
    const std::optional<double> ratio =
        r.torch_tokens_per_s ? std::optional<double>(r.tokens_per_s / *r.torch_tokens_per_s) : std::nullopt;
    s += std::string(i == 0 ? "" : ",") + "\n    {\"model\": " + json_string(r.model) +
         ", \"recompute\": " + json_string(recompute_name(r.recompute)) +
         ", \"tokens_per_s\": " + json_number(r.tokens_per_s) +
         ", \"mfu\": " + json_number(r.flops_per_s / kPeakBf16Flops) +
         ", \"torch_tokens_per_s\": " + number_or_null(r.torch_tokens_per_s) +
         ", \"torch_ratio\": " + number_or_null(ratio) + "}";
  }
  s += "\n  ]\n}\n";
  std::ofstream out(path);
  out << s;
  if (!out.flush()) throw std::runtime_error("cannot write --json " + path);
}

const std::vector<OptionSpec> kOptions = {
    {"model", true, "comma-separated: 124m, 350m, 1.5b, llama-1b, tiny, llama-tiny; both (default): 124m,350m"},
    {"micro-batch", true, "micro-batch mb (default 8)"},
    {"batch", true, "global batch B, a multiple of mb (default 8)"},
    {"recompute", true, "auto (default: the chooser's pick for this GPU's memory), none, attention or block"},
    {"rounds", true, "rounds of each side per model, alternating; the table gives medians (default 3)"},
    {"warmup", true, "untimed steps before the timed ones (default 3)"},
    {"steps", true, "timed steps per round (default 10)"},
    {"gemm", true, "n of the n^3 GEMM rate measured on both sides (default 8192)"},
    {"gemm-candidates", true,
     "cuBLASLt algorithms timed per GEMM shape, the fastest kept (default 1: the heuristic's)"},
    {"python", true, "the Python that runs bench/train_gpu_torch.py (default python3)"},
    {"no-torch", false, "skip the PyTorch side"},
    {"profile", false, "no references: our step's time per backend op"},
    {"fit", false, "the largest micro-batch and sequence that train, ours and PyTorch's (models: 350m,1.5b)"},
    {"max-micro-batch", true, "with --fit: the micro-batch search's cap (default 1024)"},
    {"max-sequence", true, "with --fit: the sequence search's cap (default 65536)"},
    {"float32-activations", false, "activations in float32 instead of bfloat16"},
    {"json", true, "also write the medians as JSON to PATH (bench/results/train_gpu.json's format)"},
    {"help", false, "this help"},
};

Options read_options(const Args& args) {
  no_positionals(args);
  Options o;
  o.torch = !args.has("no-torch");
  o.profile = args.has("profile");
  if (args.has("float32-activations")) o.activations = ElementType::float32;
  o.models = gpu_models_named(args.value("model").value_or("both"));
  o.micro_batch = count_option(args, "micro-batch", o.micro_batch);
  o.batch = count_option(args, "batch", o.batch);
  if (o.batch % o.micro_batch != 0)
    throw UsageError("--batch " + std::to_string(o.batch) + " is not a multiple of --micro-batch " +
                     std::to_string(o.micro_batch));
  if (const auto mode = args.value("recompute"); mode && *mode != "auto") o.recompute = recompute_named(*mode);
  o.rounds = count_option(args, "rounds", o.rounds);
  o.warmup = static_cast<int>(args.integer("warmup", 0, 1 << 30).value_or(o.warmup));
  o.steps = count_option(args, "steps", o.steps);
  o.gemm = count_option(args, "gemm", o.gemm);
  o.gemm_candidates = count_option(args, "gemm-candidates", o.gemm_candidates);
  o.python = args.value("python").value_or(o.python);
  o.json = args.value("json");
  o.fit = args.has("fit");
  o.fit_options.models = gpu_models_named(args.value("model").value_or("350m,1.5b"));
  o.fit_options.max_micro_batch = count_option(args, "max-micro-batch", o.fit_options.max_micro_batch);
  o.fit_options.max_sequence = count_option(args, "max-sequence", o.fit_options.max_sequence);
  o.fit_options.python = o.python;
  o.fit_options.torch = o.torch;
  if (o.fit && o.activations != ElementType::bfloat16)
    throw UsageError("--fit measures bf16 training (as training.dtype = \"bfloat16\"); drop --float32-activations");
  return o;
}

const char* verdict(bool met) { return met ? "met" : "MISSED"; }

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse_bench_args(argc, argv, kOptions, "bench_train_gpu [options]", read_options);
  o.command = "bench_train_gpu";
  for (int i = 1; i < argc; ++i) o.command += std::string(" ") + argv[i];
  if (o.json) o.commit = measured_commit();
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("bench_train_gpu: no CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  const CudaDeviceInfo gpu = cuda_device_info(0);
  select_cuda_device(0, 1);
  CudaBackendOptions backend_options;
  backend_options.device = 0;
  backend_options.gemm_math = GemmMath::bf16;
  backend_options.activations = o.activations;
  backend_options.gemm_candidates = o.gemm_candidates;
  if (o.fit) {
    run_fit(backend_options, gpu, o.fit_options);
    return 0;
  }
  const std::unique_ptr<Backend> backend = make_cuda_backend(backend_options);
  const auto data = std::make_shared<const TokenData>(builtin_corpus());
  // The recomputation each model runs with: --recompute's, or the chooser's for this GPU.
  const auto recompute_of = [&](const GpuModel& model) {
    if (o.recompute) return ChosenRecompute{*o.recompute, "--recompute " + std::string(recompute_name(*o.recompute))};
    return chosen_recompute(model.shape, o.batch, o.micro_batch, gpu.memory_bytes);
  };
  if (o.profile) {
    for (const GpuModel& model : o.models) {
      data->validate(model.shape.vocab, model.shape.sequence, o.batch);
      our_profile(*backend, o, model, recompute_of(model).mode, data);
    }
    return 0;
  }

  const double gemm_flops = backend_gemm_flops(*backend, o.gemm);
  std::printf(
      "GPU 0 (%s, %.1f GiB), GEMMs %s, activations %s; backend gemm %d^3: %.1f TFLOP/s (%.1f%% of the %.0f "
      "TFLOP/s bf16 peak)\n",
      gpu.name.c_str(), gpu.memory_bytes / (1 << 30), gemm_math_name(backend_options.gemm_math),
      element_type_name(o.activations), o.gemm, gemm_flops / 1e12, 100.0 * gemm_flops / kPeakBf16Flops,
      kPeakBf16Flops / 1e12);
  std::printf(
      "step: %d sequences in micro-batches of %d, AdamW + clipping; %d untimed + %d timed steps (median); "
      "%d round(s) per side, alternating\n\n",
      o.batch, o.micro_batch, o.warmup, o.steps, o.rounds);

  std::optional<double> torch_matmul;
  std::vector<ModelResult> results;
  for (const GpuModel& model : o.models) {
    const ModelShape& m = model.shape;
    data->validate(m.vocab, m.sequence, o.batch);
    const ChosenRecompute recompute = recompute_of(model);
    std::printf("%s: recompute %s (%s)\n", model.name.c_str(), recompute_name(recompute.mode),
                recompute.reason.c_str());
    const double tokens = static_cast<double>(o.batch) * m.sequence;
    std::vector<double> ours, theirs;
    double params = 0;
    for (int r = 0; r < o.rounds; ++r) {
      const OurRun run = our_run(*backend, o, m, recompute.mode, data);
      params = run.params;
      ours.push_back(tokens / run.step_s);
      std::printf("  round %d: ours %.0f tok/s", r + 1, ours.back());
      if (o.torch) {
        const TorchRun torch = torch_run(o, m, recompute.mode, !torch_matmul.has_value());
        if (torch.matmul_flops) torch_matmul = torch.matmul_flops;
        theirs.push_back(torch.tokens_per_s);
        std::printf(", PyTorch %.0f tok/s", theirs.back());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    ChooserInput plan;
    plan.model = m;
    plan.batch = {o.batch, o.micro_batch, ElementType::float32};  // as train_command.cpp: flops need no dtype
    const double flops = flops_per_rank(plan, Layout{});
    ModelResult result{model.name, recompute.mode, params, median(ours), 0, std::nullopt};
    result.flops_per_s = flops * result.tokens_per_s / tokens;
    if (o.torch) result.torch_tokens_per_s = median(theirs);
    results.push_back(result);
    if (o.json) write_json(*o.json, o, gpu.name, results);  // after each model: what finished survives a kill
  }

  std::printf("\nmedians of %d round(s):\n%10s %8s %10s %11s %10s %9s %10s %12s %11s\n", o.rounds, "model", "params",
              "recompute", "ours tok/s", "ours TF/s", "MFU peak", "MFU gemm", "torch tok/s", "ours/torch");
  bool mfu_goal = true, torch_goal = true, has_350m = false;
  for (const ModelResult& r : results) {
    std::printf("%10s %7.0fM %10s %11.0f %10.1f %8.1f%% %9.1f%%", r.model.c_str(), r.params / 1e6,
                recompute_name(r.recompute), r.tokens_per_s, r.flops_per_s / 1e12,
                100.0 * r.flops_per_s / kPeakBf16Flops, 100.0 * r.flops_per_s / gemm_flops);
    if (r.model == "350m") {
      has_350m = true;
      mfu_goal = r.flops_per_s / kPeakBf16Flops >= kMfuGoal;
    }
    if (r.torch_tokens_per_s) {
      const double ratio = r.tokens_per_s / *r.torch_tokens_per_s;
      torch_goal = torch_goal && ratio >= kTorchGoal;
      std::printf(" %12.0f %10.2fx\n", *r.torch_tokens_per_s, ratio);
    } else {
      std::printf(" %12s %11s\n", "-", "-");
    }
  }
  std::printf("\n");
  if (torch_matmul)
    std::printf("PyTorch bf16 matmul %d^3: %.1f TFLOP/s (ours: %.1f)\n", o.gemm, *torch_matmul / 1e12,
                gemm_flops / 1e12);
  if (has_350m) std::printf("goal MFU >= %.0f%% at 350M: %s\n", 100.0 * kMfuGoal, verdict(mfu_goal));
  if (o.torch) std::printf("goal ours/PyTorch >= %.1fx: %s\n", kTorchGoal, verdict(torch_goal));
  if (o.json) std::printf("wrote %s\n", o.json->c_str());
  return 0;
} catch (const std::exception& e) {
  const bool memory = std::string(e.what()).find("cudaMalloc") != std::string::npos;
  std::fprintf(stderr, "bench_train_gpu: %s%s\n", e.what(), memory ? " (a smaller --micro-batch needs less)" : "");
  return 1;
}
