// bench_ops_gpu --attention (ops_gpu_attention.hpp).
#include "ops_gpu_attention.hpp"

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "gpu_timing.hpp"
#include "torch_side.hpp"

namespace axonn::bench {
namespace {

struct Shape {
  int64_t B, T, h, d;
  double forward_flops() const {  // 4·B·h·T²·d, halved by the causal mask
    return 2.0 * static_cast<double>(B * h * d) * static_cast<double>(T) * static_cast<double>(T);
  }
};

struct Times {
  double forward_s = 0, backward_s = 0;
};

// Our kernels at `s`: q, k, v, out, dout, dq, dk, dv (B, T, h·d) each, lse (B, h, T).
Times our_times(Backend& backend, const Shape& s, int calls) {
  const int64_t count = s.B * s.T * s.h * s.d, ld = s.h * s.d;
  Activations q(backend, count), k(backend, count), v(backend, count), out(backend, count), dout(backend, count),
      dq(backend, count), dk(backend, count), dv(backend, count);
  DeviceBuffer<float> lse(backend, static_cast<size_t>(s.B * s.h * s.T));
  Times t;
  t.forward_s = seconds_per_call(backend, calls, [&] {
    backend.attention_forward(out.ptr(), lse.data(), q.ptr(), k.ptr(), v.ptr(), ld, s.B, s.T, s.h, s.h, s.d, s.d);
  });
  t.backward_s = seconds_per_call(backend, calls, [&] {
    backend.attention_backward(dq.ptr(), dk.ptr(), dv.ptr(), dout.ptr(), out.ptr(), lse.data(), q.ptr(), k.ptr(),
                               v.ptr(), ld, s.B, s.T, s.h, s.h, s.d, s.d);
  });
  return t;
}

std::string joined(const std::vector<int64_t>& values) {
  std::string out;
  for (const int64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

// PyTorch's times by (T, d): ops_gpu_attention_torch.py prints one JSON line per shape,
// {"sequence": T, "head_dim": d, "forward_s": .., "backward_s": ..}, then a summary line.
std::map<std::pair<int64_t, int64_t>, Times> torch_times(const AttentionOptions& o) {
  const std::string command = torch_command(
      o.python, "ops_gpu_attention_torch.py",
      " --tokens " + std::to_string(o.tokens) + " --hidden " + std::to_string(o.hidden) + " --seqs " +
          joined(o.sequences) + " --head-dims " + joined(o.head_dims) + " --calls " + std::to_string(o.calls));
  const std::string output = run_torch_side(command, "shapes");
  std::map<std::pair<int64_t, int64_t>, Times> times;
  for (size_t line = 0, next; line < output.size(); line = next + 1) {
    next = output.find('\n', line);
    if (next == std::string::npos) next = output.size();
    const std::string text = output.substr(line, next - line);
    if (text.rfind("{\"sequence\": ", 0) != 0) continue;
    const auto T = json_number(text, "sequence"), d = json_number(text, "head_dim");
    const auto forward = json_number(text, "forward_s"), backward = json_number(text, "backward_s");
    if (T && d && forward && backward)
      times[{static_cast<int64_t>(*T), static_cast<int64_t>(*d)}] = Times{*forward, *backward};
  }
  return times;
}

}  // namespace

void run_attention_vs_torch(Backend& backend, const AttentionOptions& o) {
  std::map<std::pair<int64_t, int64_t>, Times> theirs;
  if (o.torch) theirs = torch_times(o);
  std::printf(
      "causal attention, bf16, %lld tokens of hidden %lld; TFLOP/s (FlashAttention-2's count), median of 5 "
      "rounds of %d calls\n",
      static_cast<long long>(o.tokens), static_cast<long long>(o.hidden), o.calls);
  std::printf("%6s %6s %4s %4s %10s %10s %8s %10s %10s %8s\n", "T", "B", "h", "d", "fwd ours", "fwd sdpa", "ratio",
              "bwd ours", "bwd sdpa", "ratio");
  bool goal = true;
  for (const int64_t d : o.head_dims)
    for (const int64_t T : o.sequences) {
      if (o.hidden % d != 0 || o.tokens % T != 0) {
        const bool sequences = o.tokens % T != 0;
        std::printf("%6lld %6s %4s %4lld  skipped: --attention-%s %lld is not a multiple of %s = %lld\n",
                    static_cast<long long>(T), "-", "-", static_cast<long long>(d), sequences ? "tokens" : "hidden",
                    static_cast<long long>(sequences ? o.tokens : o.hidden), sequences ? "T" : "d",
                    static_cast<long long>(sequences ? T : d));
        continue;
      }
      const Shape s{o.tokens / T, T, o.hidden / d, d};
      const Times ours = our_times(backend, s, o.calls);
      const double f = s.forward_flops(), b = 2.5 * f;
      std::printf("%6lld %6lld %4lld %4lld %10.1f", static_cast<long long>(T), static_cast<long long>(s.B),
                  static_cast<long long>(s.h), static_cast<long long>(d), f / ours.forward_s / 1e12);
      const auto it = theirs.find({T, d});
      if (it == theirs.end()) {
        std::printf(" %10s %8s %10.1f %10s %8s\n", "-", "-", b / ours.backward_s / 1e12, "-", "-");
        goal = goal && !o.torch;
        continue;
      }
      const Times& sdpa = it->second;
      const double forward_ratio = sdpa.forward_s / ours.forward_s, backward_ratio = sdpa.backward_s / ours.backward_s;
      goal = goal && forward_ratio >= 1.0 && backward_ratio >= 1.0;
      std::printf(" %10.1f %7.2fx %10.1f %10.1f %7.2fx\n", f / sdpa.forward_s / 1e12, forward_ratio,
                  b / ours.backward_s / 1e12, b / sdpa.backward_s / 1e12, backward_ratio);
      std::fflush(stdout);
    }
  if (o.torch)
    std::printf("\ngoal ours >= SDPA's FlashAttention-2, forward and backward, every shape: %s\n",
                goal ? "met" : "MISSED");
}

}  // namespace axonn::bench
