#include "runner/calibrate/calibrate_gemm.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <tuple>

#include "runner/calibrate/mean_seconds.hpp"
#include "comm/bfloat16.hpp"
#include "comm/cuda_device.hpp"
#include "layout/layout_search.hpp"
#include "layout/memory_bound_bytes.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

// A buffer of `count` activations of `dtype`, each a small value (0.01): zeros would be as
// fast, but a tensor core or a BLAS might one day skip them.
struct Activations {
  DeviceBuffer<float> f32;
  DeviceBuffer<uint16_t> bf16;
  ElementType dtype;
  Activations(Backend& backend, ElementType type, int64_t count) : dtype(type) {
    const auto n = static_cast<size_t>(count);
    if (type == ElementType::float32)
      f32 = DeviceBuffer<float>(backend, std::vector<float>(n, 0.01f));
    else
      bf16 = DeviceBuffer<uint16_t>(backend, std::vector<uint16_t>(n, float_to_bf16(0.01f)));
  }
  ActPtr ptr() {
    return dtype == ElementType::float32 ? ActPtr(f32.data()) : ActPtr(bf16.data(), ElementType::bfloat16);
  }
};

}  // namespace

double linear_flops(const GemmShape& s) {
  return 6.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
}

std::vector<GemmShape> calibration_gemm_shapes(const std::optional<ChooserInput>& job, int world, bool quick) {
  std::vector<GemmShape> shapes;
  if (job) {
    for (const Layout& layout : enumerate_layouts(world)) {
      if (!divisibility_problem(job->model, job->batch, layout).empty()) continue;
      for (const GemmShape& s : local_gemm_shapes(*job, layout)) shapes.push_back(s);
    }
  } else {
    for (int64_t size = 256; size <= (quick ? 1024 : 2048); size *= 2) shapes.push_back({size, size, size});
  }
  auto key = [](const GemmShape& s) { return std::tuple(s.m, s.k, s.n); };
  std::sort(shapes.begin(), shapes.end(), [&](const GemmShape& a, const GemmShape& b) { return key(a) < key(b); });
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  return shapes;
}

double compute_window_seconds(bool quick) { return quick ? 0.05 : 0.2; }

namespace {

// Sets of `bytes` each that together fill kColdWorkingSetBytes, 1 to 256.
int sets_filling_working_set(double bytes) {
  return static_cast<int>(std::clamp(std::ceil(kColdWorkingSetBytes / bytes), 1.0, 256.0));
}

// Mean seconds of `run` (which waits for its work) on the next of `sets` each time, after one
// untimed run on the first (the backend's first call at a shape: BLAS buffers, GEMM
// heuristics). The sets were written when made (first touch, page faults), so the timed runs
// find their operands written long before, in memory rather than in a cache. Then `start`,
// then the runs within the window. (Running every set untimed first, as this once did, cost
// as much as the window itself at small shapes, once per shape and pass.)
template <class Set, class Run>
double mean_seconds_cycling(std::vector<Set>& sets, double window_s, const std::function<void()>& start, Run run) {
  run(sets.at(0));  // cold_operand_sets makes at least one
  size_t next = 1 % sets.size();
  auto run_next = [&] {
    run(sets[next]);
    next = (next + 1) % sets.size();
  };
  start();
  return mean_seconds_within(run_next, window_s, kMinTimedRuns);
}

// One linear layer's operands: X (m, k), W (k, n), Y and dY (m, n), dX (m, k) in the dtype,
// and the float32 gradient dW (k, n) that dW GEMMs accumulate into.
struct LinearOperands {
  Activations x, w, y, dy, dx;
  DeviceBuffer<float> dw;
  LinearOperands(Backend& backend, ElementType dtype, const GemmShape& s)
      : x(backend, dtype, s.m * s.k),
        w(backend, dtype, s.k * s.n),
        y(backend, dtype, s.m * s.n),
        dy(backend, dtype, s.m * s.n),
        dx(backend, dtype, s.m * s.k),
        dw(backend, std::vector<float>(static_cast<size_t>(s.k * s.n), 0.0f)) {}
};

}  // namespace

int cold_operand_sets(const GemmShape& s, ElementType dtype) {
  const double element = dtype == ElementType::float32 ? 4.0 : 2.0;
  const double bytes =
      element * static_cast<double>(2 * s.m * s.k + 2 * s.m * s.n + s.k * s.n) + 4.0 * static_cast<double>(s.k * s.n);
  return sets_filling_working_set(bytes);
}

double time_linear_gemms(Backend& backend, ElementType dtype, const GemmShape& s, double window_s,
                         const std::function<void()>& start) {
  const int64_t m = s.m, k = s.k, n = s.n;
  std::vector<LinearOperands> sets;
  for (int i = cold_operand_sets(s, dtype); i > 0; --i) sets.emplace_back(backend, dtype, s);
  return mean_seconds_cycling(sets, window_s, start, [&](LinearOperands& o) {
    backend.gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, o.x.ptr(), k, o.w.ptr(), n, 0.0f, o.y.ptr(),
                 n);  // Y = X·W
    backend.gemm(Transpose::no, Transpose::yes, m, k, n, 1.0f, o.dy.ptr(), n, o.w.ptr(), n, 0.0f, o.dx.ptr(),
                 k);  // dX = dY·W^T
    // dW (float32, a parameter's gradient) += X^T·dY, accumulating as over micro-batches.
    backend.gemm(Transpose::yes, Transpose::no, k, n, m, 1.0f, o.x.ptr(), k, o.dy.ptr(), n, 1.0f, o.dw.data(), n);
    backend.synchronize();
  });
}

std::vector<AttentionShape> calibration_attention_shapes(const std::optional<ChooserInput>& job, int world,
                                                         bool quick) {
  std::vector<AttentionShape> shapes;
  if (job) {
    const ModelShape& model = job->model;
    for (const Layout& layout : enumerate_layouts(world)) {
      if (!divisibility_problem(model, job->batch, layout).empty()) continue;
      shapes.push_back({batch_split(model, job->batch, layout).micro_batch, model.sequence, model.heads / layout.y,
                        model.hidden / model.heads});
    }
  } else {
    shapes.push_back({1, quick ? 256 : 512, 4, 64});
  }
  auto key = [](const AttentionShape& s) { return std::tuple(s.batch, s.sequence, s.heads, s.head_size); };
  std::sort(shapes.begin(), shapes.end(),
            [&](const AttentionShape& a, const AttentionShape& b) { return key(a) < key(b); });
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  return shapes;
}

double attention_flops(const AttentionShape& s) {
  const double T = static_cast<double>(s.sequence);
  return 12.0 * static_cast<double>(s.batch * s.heads) * T * T * static_cast<double>(s.head_size);
}

namespace {

// One block's attention operands: q, k, v packed as the model's qkv output (B, T, 3·h·d),
// their gradients likewise, the output and its gradient (B, T, h·d), the log-sum-exp (B, h, T).
struct AttentionOperands {
  Activations qkv, dqkv, out, dout;
  DeviceBuffer<float> lse;
  AttentionOperands(Backend& backend, ElementType dtype, const AttentionShape& s)
      : qkv(backend, dtype, s.batch * s.sequence * 3 * s.heads * s.head_size),
        dqkv(backend, dtype, s.batch * s.sequence * 3 * s.heads * s.head_size),
        out(backend, dtype, s.batch * s.sequence * s.heads * s.head_size),
        dout(backend, dtype, s.batch * s.sequence * s.heads * s.head_size),
        lse(backend, static_cast<size_t>(s.batch * s.heads * s.sequence)) {}
};

}  // namespace

int cold_operand_sets(const AttentionShape& s, ElementType dtype) {
  const double element = dtype == ElementType::float32 ? 4.0 : 2.0;
  const double values = static_cast<double>(s.batch * s.sequence * s.heads * s.head_size);
  const double bytes = element * 8.0 * values + 4.0 * static_cast<double>(s.batch * s.heads * s.sequence);
  return sets_filling_working_set(bytes);
}

double time_attention(Backend& backend, ElementType dtype, const AttentionShape& s, double window_s,
                      const std::function<void()>& start) {
  const int64_t B = s.batch, T = s.sequence, h = s.heads, d = s.head_size, width = h * d, ld = 3 * width;
  std::vector<AttentionOperands> sets;
  for (int i = cold_operand_sets(s, dtype); i > 0; --i) sets.emplace_back(backend, dtype, s);
  return mean_seconds_cycling(sets, window_s, start, [&](AttentionOperands& o) {
    const ActPtr q = o.qkv.ptr(), k = q + width, v = q + 2 * width;
    const ActPtr dq = o.dqkv.ptr(), dk = dq + width, dv = dq + 2 * width;
    backend.attention_forward(o.out.ptr(), o.lse.data(), q, k, v, ld, B, T, h, h, d, d);
    backend.attention_backward(dq, dk, dv, o.dout.ptr(), o.out.ptr(), o.lse.data(), q, k, v, ld, B, T, h, h, d, d);
    backend.synchronize();
  });
}

struct ForwardGemm::Buffers {
  Activations x, w, y;
};

ForwardGemm::ForwardGemm(Backend& backend, ElementType dtype, const GemmShape& shape)
    : backend_(backend),
      shape_(shape),
      buffers_(std::make_unique<Buffers>(Buffers{Activations(backend, dtype, shape.m * shape.k),
                                                 Activations(backend, dtype, shape.k * shape.n),
                                                 Activations(backend, dtype, shape.m * shape.n)})) {}

ForwardGemm::~ForwardGemm() = default;

void ForwardGemm::run() {
  const int64_t m = shape_.m, k = shape_.k, n = shape_.n;
  backend_.gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, buffers_->x.ptr(), k, buffers_->w.ptr(), n, 0.0f,
                buffers_->y.ptr(), n);
  backend_.synchronize();
}

GemmShape typical_gemm_shape(const std::vector<GemmShape>& shapes) {
  std::vector<GemmShape> by_flops = shapes;
  std::sort(by_flops.begin(), by_flops.end(),
            [](const GemmShape& a, const GemmShape& b) { return linear_flops(a) < linear_flops(b); });
  return by_flops.empty() ? GemmShape{256, 256, 256} : by_flops[by_flops.size() / 2];
}

ElementwiseProbe elementwise_probe(const std::optional<ChooserInput>& job, ElementType dtype, bool cuda) {
  ChooserInput input;
  if (job) {
    input = *job;
  } else {
    input.model.hidden = 1024;
    input.model.heads = 16;
    input.model.sequence = cuda ? 8192 : 2048;
    input.batch = {1, 1, dtype};
  }
  input.batch.dtype = dtype;
  input.machine.gemm_epilogues = false;  // the probe runs every pass on its own
  const Layout whole;                    // 1x1x1x1: the full width
  ElementwiseProbe p;
  p.rows = batch_split(input.model, input.batch, whole).tokens;
  p.width = input.model.hidden;
  p.mlp = 4 * input.model.hidden;
  p.bytes = block_memory_bound_elements(input, whole) * static_cast<double>(element_size(dtype));
  return p;
}

namespace {

// The probe's buffers: the residual stream's (rows, C) a, b, x, out, dout, dx; qkv's output
// (rows, 3C); the MLP's pre-activation, activation and their gradient (rows, 4C); float32
// LayerNorm statistics, parameters and their gradients; zero biases (so that repeated bias
// passes leave the values as they are).
struct ElementwiseOperands {
  Activations a, b, x, out, dout, dx, qkv, pre, act, dpre;
  DeviceBuffer<float> mean, rstd, partials, gamma, beta, dgamma, dbeta, bias_qkv, bias_width, bias_mlp, dbias;
  ElementwiseOperands(Backend& backend, ElementType dtype, const ElementwiseProbe& p)
      : a(backend, dtype, p.rows * p.width),
        b(backend, dtype, p.rows * p.width),
        x(backend, dtype, p.rows * p.width),
        out(backend, dtype, p.rows * p.width),
        dout(backend, dtype, p.rows * p.width),
        dx(backend, dtype, p.rows * p.width),
        qkv(backend, dtype, p.rows * 3 * p.width),
        pre(backend, dtype, p.rows * p.mlp),
        act(backend, dtype, p.rows * p.mlp),
        dpre(backend, dtype, p.rows * p.mlp),
        mean(backend, static_cast<size_t>(p.rows)),
        rstd(backend, static_cast<size_t>(p.rows)),
        partials(backend, static_cast<size_t>(2 * p.rows)),
        gamma(backend, std::vector<float>(static_cast<size_t>(p.width), 1.0f)),
        beta(backend, std::vector<float>(static_cast<size_t>(p.width), 0.0f)),
        dgamma(backend, std::vector<float>(static_cast<size_t>(p.width), 0.0f)),
        dbeta(backend, std::vector<float>(static_cast<size_t>(p.width), 0.0f)),
        bias_qkv(backend, std::vector<float>(static_cast<size_t>(3 * p.width), 0.0f)),
        bias_width(backend, std::vector<float>(static_cast<size_t>(p.width), 0.0f)),
        bias_mlp(backend, std::vector<float>(static_cast<size_t>(p.mlp), 0.0f)),
        dbias(backend, std::vector<float>(static_cast<size_t>(p.mlp), 0.0f)) {}
};

}  // namespace

double time_elementwise(Backend& backend, ElementType dtype, const ElementwiseProbe& p, double window_s,
                        const std::function<void()>& start) {
  const int64_t m = p.rows, c = p.width, f = p.mlp;
  constexpr float kEps = 1e-5f;
  ElementwiseOperands o(backend, dtype, p);
  auto run = [&] {
    // Forward: ln1 (with the residual add), qkv's and attn.proj's biases, ln2, mlp.fc's bias
    // and GELU, mlp.proj's bias.
    auto layernorm = [&] {
      backend.residual_layernorm_rows(o.x.ptr(), o.out.ptr(), o.mean.data(), o.rstd.data(), o.a.ptr(), o.b.ptr(),
                                      o.gamma.data(), o.beta.data(), m, c, kEps);
    };
    layernorm();
    backend.bias_forward(o.qkv.ptr(), o.bias_qkv.data(), m, 3 * c, 3 * c);
    backend.bias_forward(o.dout.ptr(), o.bias_width.data(), m, c, c);
    layernorm();
    backend.bias_forward(o.pre.ptr(), o.bias_mlp.data(), m, f, f);
    backend.gelu_forward(o.act.ptr(), o.pre.ptr(), m * f);
    backend.bias_forward(o.dout.ptr(), o.bias_width.data(), m, c, c);
    // Backward: GELU, the four column sums, both LayerNorms.
    backend.gelu_backward(o.dpre.ptr(), o.pre.ptr(), o.act.ptr(), m * f);
    backend.bias_backward(o.dbias.data(), o.dout.ptr(), m, c, c);
    backend.bias_backward(o.dbias.data(), o.dpre.ptr(), m, f, f);
    backend.bias_backward(o.dbias.data(), o.dout.ptr(), m, c, c);
    backend.bias_backward(o.dbias.data(), o.qkv.ptr(), m, 3 * c, 3 * c);
    for (int ln = 0; ln < 2; ++ln)
      backend.layernorm_rows_backward(o.dx.ptr(), o.dgamma.data(), o.dbeta.data(), o.partials.data(), o.dout.ptr(),
                                      o.x.ptr(), o.mean.data(), o.rstd.data(), o.gamma.data(), m, c);
    backend.synchronize();
  };
  run();
  start();
  return mean_seconds_within(run, window_s, kMinTimedRuns);
}

double rank_memory_bytes(bool cuda, int gpu, int ranks_sharing) {
  if (cuda) return cuda_device_info(gpu).memory_bytes;
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemTotal:") return kib * 1024.0 / std::max(1, ranks_sharing);
  return 0;
}

}  // namespace axonn
