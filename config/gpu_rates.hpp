#pragma once
// A GPU's peak arithmetic rate from what the CUDA runtime reports about it (compute
// capability, multiprocessors, maximum SM clock), for a site config described from the GPUs
// a machine has (runner/cli/local_gpu_site.hpp) rather than read from a file.
//
// Peak = FLOP per clock per multiprocessor (dense, per architecture: the tables of NVIDIA's
// architecture whitepapers) x multiprocessors x the maximum SM clock. At the maximum clock
// this is a little above the figure NVIDIA quotes where that uses a lower boost clock
// (H100 SXM: 132 SMs x 4096 x 1.98 GHz = 1071 TFLOP/s bf16 against the 989 quoted at
// 1.83 GHz); a site config file (site_configs/dgx-h100.toml) gives the quoted one.
#include <string>

namespace axonn {

struct GpuArchRates {
  int major = 0, minor = 0;        // the table row's compute capability (sm_<major><minor>)
  double float32_per_clock = 0;    // per SM: CUDA-core FMA = 2 FLOP (no TF32)
  double bfloat16_per_clock = 0;   // per SM: tensor cores, dense, float32 accumulation
};

// The rates of compute capability major.minor: its own row, else the nearest older one
// (a newer part is at least as fast per clock as the row before it). Null below sm_80,
// which has no bf16 tensor cores.
const GpuArchRates* gpu_arch_rates(int major, int minor);

// "sm_90" for 9.0.
std::string sm_name(int major, int minor);

}  // namespace axonn
