// The memory-bound ops of a GPT block on the CUDA backend (GPU 0) against a device-to-device
// copy measured in the same run: each op's bytes moved per second as a fraction of the copy's.
// An op that streams its inputs once and writes its outputs once should come near 1.0; one
// far below it re-reads, under-fills the GPU or waits on latency. The shape is one
// micro-batch of a block, rows = B·T and cols = hidden (default 8192 x 1024: GPT-2 350M at
// B = 8, T = 1024), activations in bf16 (as training.dtype = "bfloat16") unless
// --float32-activations.
//
// usage: bench_ops_gpu [--rows R] [--cols C] [--calls N] [--seq T] [--float32-activations]
//        bench_ops_gpu --attention [--attention-tokens N] [--attention-hidden N]
//                      [--attention-seqs T,...] [--attention-head-dims d,...] [--calls N]
//                      [--python PATH] [--no-torch]
// --attention: only causal attention, bf16, against PyTorch's SDPA (FlashAttention-2) at
// FlashAttention-2's benchmark shapes (ops_gpu_attention.hpp).
//
// Then the block's forward GEMMs (qkv, proj, fc, fc_proj: m = rows, n x k = 3C x C, C x C,
// 4C x C, C x 4C) in TFLOP/s side by side: the plain GEMM with the weights stored (k, n) as
// the trainer stores them ("NN"); the bias added by cuBLASLt's epilogue (the trainer's
// linear_forward) and by the bias kernel after the plain GEMM; for fc the same with the
// GELU (linear_gelu_forward, and the GEMM, bias and GELU kernels); and the plain GEMM with
// the weights stored transposed, (n, k) ("NT", PyTorch's nn.Linear layout): what the
// epilogues cost against the kernels they replace, and what the weights' layout does. Then
// the same linears' backward GEMMs: dX = dY·W^T plain and, for fc_proj (whose input was the
// GELU's output), with cuBLASLt's DGELU epilogue and with the gelu_backward kernel after
// (linear_input_grad_gelu); dW = X^T·dY (float32) plain, with the BGRADA epilogue summing
// dbias, and with the bias_backward kernel before (linear_weight_grad). Last, causal
// attention forward and backward in TFLOP/s, rows / T sequences of T tokens (--seq), heads of
// 64.
//
// Bytes are each op's least traffic (its inputs read once, its outputs written once; the
// float32 row statistics and parameters, a few KiB, left out). Times are the median over 5
// rounds of N back-to-back calls, after 3 untimed calls. Without a CUDA device it says so in
// one line and exits 0: there is nothing to measure.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "gpu_timing.hpp"
#include "ops_gpu_attention.hpp"
#include "trainer/cuda/cuda_backend.hpp"

using namespace axonn;
using namespace axonn::bench;

namespace {

struct Options {
  int64_t rows = 8192;
  int64_t cols = 1024;
  int calls = 20;
  int64_t seq = 1024;
  ElementType activations = ElementType::bfloat16;
  bool attention = false;
  AttentionOptions attention_options;  // with attention
};

// "512,1024" as numbers of at least 1; UsageError naming the option otherwise.
std::vector<int64_t> count_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string word = text.substr(at, comma - at);
    char* end = nullptr;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (word.empty() || *end != '\0' || v < 1)
      throw UsageError("option '--" + option + "' must be whole numbers of at least 1, comma-separated; got '" + text +
                       "'");
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

const std::vector<OptionSpec> kOptions = {
    {"rows", true, "rows of the activations, B*T (default 8192)"},
    {"cols", true, "columns, the hidden size (default 1024); the MLP's are 4x"},
    {"calls", true, "back-to-back calls per timed round (default 20)"},
    {"seq", true, "tokens per sequence of the attention timing (default 1024; rows / seq sequences)"},
    {"float32-activations", false, "activations in float32 instead of bfloat16"},
    {"attention", false, "only causal attention, bf16, against PyTorch's SDPA (FlashAttention-2)"},
    {"attention-tokens", true, "with --attention: B*T tokens (default 16384)"},
    {"attention-hidden", true, "with --attention: h*d (default 2048)"},
    {"attention-seqs", true, "with --attention: the sequences T (default 512,1024,2048,4096,8192,16384)"},
    {"attention-head-dims", true, "with --attention: the head sizes d (default 64,128)"},
    {"python", true, "with --attention: the Python that runs bench/ops_gpu_attention_torch.py (default python3)"},
    {"no-torch", false, "with --attention: skip the PyTorch side"},
    {"help", false, "this help"},
};

Options read_options(const Args& args) {
  no_positionals(args);
  Options o;
  o.rows = count_option(args, "rows", static_cast<int>(o.rows));
  o.cols = count_option(args, "cols", static_cast<int>(o.cols));
  o.calls = count_option(args, "calls", o.calls);
  o.seq = count_option(args, "seq", static_cast<int>(o.seq));
  if (args.has("float32-activations")) o.activations = ElementType::float32;
  o.attention = args.has("attention");
  AttentionOptions& a = o.attention_options;
  a.tokens = count_option(args, "attention-tokens", static_cast<int>(a.tokens));
  a.hidden = count_option(args, "attention-hidden", static_cast<int>(a.hidden));
  if (const auto seqs = args.value("attention-seqs")) a.sequences = count_list("attention-seqs", *seqs);
  if (const auto dims = args.value("attention-head-dims")) a.head_dims = count_list("attention-head-dims", *dims);
  a.calls = o.calls;
  a.python = args.value("python").value_or(a.python);
  a.torch = !args.has("no-torch");
  if (o.attention && o.activations != ElementType::bfloat16)
    throw UsageError("--attention times the bf16 kernels; drop --float32-activations");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_bench_args(argc, argv, kOptions, "bench_ops_gpu [options]", read_options);
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("bench_ops_gpu: no CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  select_cuda_device(0, 1);
  CudaBackendOptions backend_options;
  backend_options.activations = o.activations;
  const std::unique_ptr<Backend> owned = make_cuda_backend(backend_options);
  Backend& backend = *owned;
  if (o.attention) {
    run_attention_vs_torch(backend, o.attention_options);
    return 0;
  }

  const int64_t m = o.rows, C = o.cols, mC = m * C;
  const size_t size = element_size(o.activations);
  const double s = static_cast<double>(size);
  Activations x(backend, mC), a(backend, mC), b(backend, mC), out(backend, mC), dout(backend, mC), dx(backend, mC);
  Activations wide_x(backend, 4 * mC), wide_dout(backend, 4 * mC), wide_out(backend, 4 * mC);
  DeviceBuffer<float> gamma(backend, std::vector<float>(static_cast<size_t>(C), 1.0f));
  DeviceBuffer<float> beta(backend, std::vector<float>(static_cast<size_t>(C), 0.0f));
  DeviceBuffer<float> dgamma(backend, static_cast<size_t>(C)), dbeta(backend, static_cast<size_t>(C));
  DeviceBuffer<float> mean(backend, static_cast<size_t>(m)), rstd(backend, static_cast<size_t>(m));
  DeviceBuffer<float> partials(backend, static_cast<size_t>(2 * m));
  backend.layernorm_rows(out.ptr(), mean.data(), rstd.data(), x.ptr(), gamma.data(), beta.data(), m, C, 1e-5f);

  const double copy_bytes = 2.0 * 4.0 * static_cast<double>(mC) * s;  // 4·m·C elements read and written
  const double copy_s = seconds_per_call(backend, o.calls, [&] {
    backend.copy(wide_out.ptr().raw(), wide_x.ptr().raw(), static_cast<size_t>(4 * mC) * size);
  });
  const double copy_rate = copy_bytes / copy_s;
  std::printf("GPU 0, activations %s, rows %lld x cols %lld; device copy of %.1f MiB: %.1f GB/s\n\n",
              element_type_name(o.activations), static_cast<long long>(m), static_cast<long long>(C),
              copy_bytes / 2 / (1 << 20), copy_rate / 1e9);
  std::printf("%-34s %10s %10s %9s %12s\n", "op", "us/call", "MiB moved", "GB/s", "of the copy");

  struct Op {
    const char* name;
    double bytes;  // least traffic, in units of m·C elements
    std::function<void()> run;
  };
  const std::vector<Op> ops = {
      {"layernorm_rows (forward)", 2,
       [&] {
         backend.layernorm_rows(out.ptr(), mean.data(), rstd.data(), x.ptr(), gamma.data(), beta.data(), m, C, 1e-5f);
       }},
      {"residual_layernorm_rows", 4,
       [&] {
         backend.residual_layernorm_rows(x.ptr(), out.ptr(), mean.data(), rstd.data(), a.ptr(), b.ptr(), gamma.data(),
                                         beta.data(), m, C, 1e-5f);
       }},
      {"layernorm_rows_backward", 4,
       [&] {
         backend.layernorm_rows_backward(dx.ptr(), dgamma.data(), dbeta.data(), partials.data(), dout.ptr(), x.ptr(),
                                         mean.data(), rstd.data(), gamma.data(), m, C);
       }},
      {"  its row pass (backward_partials)", 2,
       [&] {
         backend.layernorm_backward_partials(partials.data(), dout.ptr(), x.ptr(), mean.data(), rstd.data(),
                                             gamma.data(), m, C);
       }},
      {"  dx + dgamma (backward_finish)", 4,
       [&] {
         backend.layernorm_backward_finish(dx.ptr(), dgamma.data(), dbeta.data(), partials.data(), dout.ptr(), x.ptr(),
                                           mean.data(), rstd.data(), gamma.data(), m, C, C);
       }},
      {"bias_backward (column sums)", 1, [&] { backend.bias_backward(dbeta.data(), dout.ptr(), m, C, C); }},
      {"gelu_forward (4C wide)", 8, [&] { backend.gelu_forward(wide_out.ptr(), wide_x.ptr(), 4 * mC); }},
      {"gelu_backward (4C wide)", 12,
       [&] { backend.gelu_backward(wide_out.ptr(), wide_x.ptr(), wide_dout.ptr(), 4 * mC); }},
  };
  for (const Op& op : ops) {
    const double seconds = seconds_per_call(backend, o.calls, op.run);
    const double bytes = op.bytes * static_cast<double>(mC) * s;
    std::printf("%-34s %10.1f %10.1f %9.1f %11.2fx\n", op.name, seconds * 1e6, bytes / (1 << 20), bytes / seconds / 1e9,
                bytes / seconds / copy_rate);
  }

  Activations weights(backend, 4 * C * C);
  DeviceBuffer<float> bias(backend, std::vector<float>(static_cast<size_t>(4 * C), 0.5f));
  std::printf("\n%-26s %8s %10s %10s %11s %11s %8s\n", "GEMM (m x n x k), TFLOP/s", "NN", "+bias epi", "+bias krn",
              "+b+GELU epi", "+b+GELU krn", "NT");
  struct Linear {
    const char* name;
    int64_t n, k;
  };
  for (const Linear& l :
       {Linear{"qkv", 3 * C, C}, Linear{"proj", C, C}, Linear{"fc", 4 * C, C}, Linear{"fc_proj", C, 4 * C}}) {
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(l.n) * static_cast<double>(l.k);
    auto rate = [&](const std::function<void()>& op) { return flops / seconds_per_call(backend, o.calls, op) / 1e12; };
    const ActPtr w = weights.ptr(), y = wide_out.ptr();
    const double nn = rate([&] {
      backend.gemm(Transpose::no, Transpose::no, m, l.n, l.k, 1.0f, wide_x.ptr(), l.k, w, l.n, 0.0f, y, l.n);
    });
    const double nn_bias = rate([&] { backend.linear_forward(y, wide_x.ptr(), w, bias.data(), m, l.n, l.k); });
    const double nn_bias_kernel = rate([&] {
      backend.gemm(Transpose::no, Transpose::no, m, l.n, l.k, 1.0f, wide_x.ptr(), l.k, w, l.n, 0.0f, y, l.n);
      backend.bias_forward(y, bias.data(), m, l.n, l.n);
    });
    const bool fc = l.n == 4 * C;
    const double nn_gelu =
        fc ? rate([&] { backend.linear_gelu_forward(wide_dout.ptr(), y, wide_x.ptr(), w, bias.data(), m, l.n, l.k); })
           : 0.0;
    const double nn_gelu_kernels = fc ? rate([&] {
      backend.gemm(Transpose::no, Transpose::no, m, l.n, l.k, 1.0f, wide_x.ptr(), l.k, w, l.n, 0.0f, wide_dout.ptr(),
                   l.n);
      backend.bias_forward(wide_dout.ptr(), bias.data(), m, l.n, l.n);
      backend.gelu_forward(y, wide_dout.ptr(), m * l.n);
    })
                                      : 0.0;
    const double nt = rate([&] {
      backend.gemm(Transpose::no, Transpose::yes, m, l.n, l.k, 1.0f, wide_x.ptr(), l.k, w, l.k, 0.0f, y, l.n);
    });
    const std::string shape =
        std::string(l.name) + " " + std::to_string(m) + "x" + std::to_string(l.n) + "x" + std::to_string(l.k);
    char gelu[32] = "-", gelu_kernels[32] = "-";
    if (fc) {
      std::snprintf(gelu, sizeof gelu, "%.1f", nn_gelu);
      std::snprintf(gelu_kernels, sizeof gelu_kernels, "%.1f", nn_gelu_kernels);
    }
    std::printf("%-26s %8.1f %10.1f %10.1f %11s %11s %8.1f\n", shape.c_str(), nn, nn_bias, nn_bias_kernel, gelu,
                gelu_kernels, nt);
  }

  DeviceBuffer<float> dw(backend, static_cast<size_t>(4 * C * C)), dbias(backend, static_cast<size_t>(4 * C));
  std::printf("\n%-26s %8s %11s %11s %8s %10s %10s\n", "backward (m x n x k)", "dX", "+dGELU epi", "+dGELU krn", "dW",
              "+dbias epi", "+dbias krn");
  for (const Linear& l :
       {Linear{"qkv", 3 * C, C}, Linear{"proj", C, C}, Linear{"fc", 4 * C, C}, Linear{"fc_proj", C, 4 * C}}) {
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(l.n) * static_cast<double>(l.k);
    auto rate = [&](const std::function<void()>& op) { return flops / seconds_per_call(backend, o.calls, op) / 1e12; };
    // dY (m, n), W (k, n), the input X, also the GELU's input (m, k), and its gradient (m, k).
    const ActPtr dy = wide_dout.ptr(), w = weights.ptr(), input = wide_x.ptr(), dinput = wide_out.ptr();
    const auto input_grad = [&] {
      backend.gemm(Transpose::no, Transpose::yes, m, l.k, l.n, 1.0f, dy, l.n, w, l.n, 0.0f, dinput, l.k);
    };
    const auto weight_grad = [&] {
      backend.gemm(Transpose::yes, Transpose::no, l.k, l.n, m, 1.0f, input, l.k, dy, l.n, 0.0f, dw.data(), l.n);
    };
    const bool after_gelu = l.k == 4 * C;
    char dgelu[32] = "-", dgelu_kernel[32] = "-";
    if (after_gelu) {
      std::snprintf(dgelu, sizeof dgelu, "%.1f",
                    rate([&] { backend.linear_input_grad_gelu(dinput, dy, w, input, m, l.n, l.k); }));
      std::snprintf(dgelu_kernel, sizeof dgelu_kernel, "%.1f", rate([&] {
                      input_grad();
                      backend.gelu_backward(dinput, input, dinput, m * l.k);
                    }));
    }
    const double dx_rate = rate(input_grad), dw_rate = rate(weight_grad);
    const double dbias_epi =
        rate([&] { backend.linear_weight_grad(dw.data(), 0.0f, dbias.data(), input, dy, m, l.n, l.k); });
    const double dbias_kernel = rate([&] {
      backend.bias_backward(dbias.data(), dy, m, l.n, l.n);
      weight_grad();
    });
    const std::string shape =
        std::string(l.name) + " " + std::to_string(m) + "x" + std::to_string(l.n) + "x" + std::to_string(l.k);
    std::printf("%-26s %8.1f %11s %11s %8.1f %10.1f %10.1f\n", shape.c_str(), dx_rate, dgelu, dgelu_kernel, dw_rate,
                dbias_epi, dbias_kernel);
  }

  // Causal attention over the rows as B = rows / T sequences of T tokens, C / 64 heads of 64,
  // q, k, v read in place from one packed (rows, 3C) buffer as the trainer keeps them.
  // FlashAttention's count: the forward's two products 4·B·h·T²·d halved by the mask, the
  // backward's five 2.5 times that.
  const int64_t T = o.seq, B = m / T, d = 64, h = C / d;
  if (B >= 1 && h >= 1) {
    Activations qkv(backend, 3 * mC), dqkv(backend, 3 * mC);
    DeviceBuffer<float> lse(backend, static_cast<size_t>(B * h * T));
    const auto at = [&](const Activations& buffer, int64_t part) {
      return ActPtr(static_cast<std::byte*>(buffer.ptr().raw()) + static_cast<size_t>(part * h * d) * size,
                    buffer.ptr().type());
    };
    const double forward_flops = 2.0 * static_cast<double>(B * h * d) * static_cast<double>(T) * static_cast<double>(T);
    const double forward_s = seconds_per_call(backend, o.calls, [&] {
      backend.attention_forward(out.ptr(), lse.data(), at(qkv, 0), at(qkv, 1), at(qkv, 2), 3 * h * d, B, T, h, h, d, d);
    });
    const double backward_s = seconds_per_call(backend, o.calls, [&] {
      backend.attention_backward(at(dqkv, 0), at(dqkv, 1), at(dqkv, 2), dout.ptr(), out.ptr(), lse.data(), at(qkv, 0),
                                 at(qkv, 1), at(qkv, 2), 3 * h * d, B, T, h, h, d, d);
    });
    std::printf("\n%-34s %10s %10s\n", "causal attention (B, T, h, d)", "us/call", "TFLOP/s");
    const std::string dims =
        "(" + std::to_string(B) + ", " + std::to_string(T) + ", " + std::to_string(h) + ", " + std::to_string(d) + ")";
    std::printf("%-34s %10.1f %10.1f\n", ("forward " + dims).c_str(), forward_s * 1e6,
                forward_flops / forward_s / 1e12);
    std::printf("%-34s %10.1f %10.1f\n", ("backward " + dims).c_str(), backward_s * 1e6,
                2.5 * forward_flops / backward_s / 1e12);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_ops_gpu: %s\n", e.what());
  return 1;
}
