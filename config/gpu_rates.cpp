#include "config/gpu_rates.hpp"

#include <array>

namespace axonn {
namespace {

// Data-center parts. GeForce parts of sm_86/sm_89 run bf16 with float32 accumulation at half
// these rates, so their peaks here are twice their true ones (a site file fixes that).
constexpr std::array<GpuArchRates, 5> kRates = {{
    {8, 0, 128, 2048},   // A100: 19.5 / 312 TFLOP/s at 108 SMs x 1.41 GHz
    {8, 6, 256, 1024},   // A10, A40
    {8, 9, 256, 1024},   // L4, L40S
    {9, 0, 256, 4096},   // H100, H200
    {10, 0, 256, 8192},  // B200
}};

}  // namespace

const GpuArchRates* gpu_arch_rates(int major, int minor) {
  const GpuArchRates* found = nullptr;
  for (const GpuArchRates& r : kRates)
    if (r.major < major || (r.major == major && r.minor <= minor)) found = &r;
  return found;
}

std::string sm_name(int major, int minor) { return "sm_" + std::to_string(major) + std::to_string(minor); }

}  // namespace axonn
