#include "cli/calibrate_gemm.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <tuple>

#include "cli/median.hpp"
#include "comm/bfloat16.hpp"
#include "comm/cuda_device.hpp"
#include "layout/layout_search.hpp"
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

int gemm_repetitions(const GemmShape& shape, bool quick) {
  const double target = quick ? 0.5e9 : 2e9;
  return static_cast<int>(std::clamp(target / linear_flops(shape), 3.0, 200.0));
}

double time_linear_gemms(Backend& backend, ElementType dtype, const GemmShape& s, int repetitions) {
  const int64_t m = s.m, k = s.k, n = s.n;
  Activations x(backend, dtype, m * k), w(backend, dtype, k * n), y(backend, dtype, m * n), dy(backend, dtype, m * n),
      dx(backend, dtype, m * k);
  DeviceBuffer<float> dw(backend, std::vector<float>(static_cast<size_t>(k * n), 0.0f));
  auto run = [&] {
    backend.gemm(Transpose::no, Transpose::no, m, n, k, 1.0f, x.ptr(), k, w.ptr(), n, 0.0f, y.ptr(), n);  // Y = X·W
    backend.gemm(Transpose::no, Transpose::yes, m, k, n, 1.0f, dy.ptr(), n, w.ptr(), n, 0.0f, dx.ptr(),
                 k);  // dX = dY·W^T
    // dW (float32, a parameter's gradient) += X^T·dY, accumulating as over micro-batches.
    backend.gemm(Transpose::yes, Transpose::no, k, n, m, 1.0f, x.ptr(), k, dy.ptr(), n, 1.0f, dw.data(), n);
    backend.synchronize();
  };
  run();
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(times);
}

double elementwise_bytes_per_s(Backend& backend, int64_t elements, int repetitions) {
  const auto n = static_cast<size_t>(elements);
  DeviceBuffer<float> x(backend, std::vector<float>(n, 1.0f)), y(backend, std::vector<float>(n, 0.0f));
  auto run = [&] {
    backend.axpy(y.data(), 1e-3f, x.data(), elements);
    backend.synchronize();
  };
  run();
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 12.0 * static_cast<double>(elements) / median(times);
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
