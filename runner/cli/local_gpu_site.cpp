#include "runner/cli/local_gpu_site.hpp"

#include <spdlog/fmt/fmt.h>

#include "config/config_error.hpp"
#include "config/gpu_rates.hpp"

namespace axonn {

RunSite describe_gpu_site(const RunSite& builtin, const CudaDeviceInfo& gpu, int gpus) {
  const GpuArchRates* rates = gpu_arch_rates(gpu.major, gpu.minor);
  const std::string arch = sm_name(gpu.major, gpu.minor);
  if (!rates)
    throw ConfigError("GPU 0 is a " + gpu.name + " (" + arch +
                      "), older than sm_80: the CUDA backend needs bf16 tensor cores; run on the CPU "
                      "(training.device = \"cpu\") or name a site config that fits (--site)");
  RunSite site = builtin;
  SiteConfig& c = site.config;
  const double per_clock = gpu.multiprocessors * gpu.max_clock_hz;
  c.name = "local-gpu";
  c.source = "GPU 0 as the CUDA runtime reports it";
  c.gpus_per_node = gpus;
  c.memory_gib = gpu.memory_bytes / (1024.0 * 1024.0 * 1024.0);
  c.peak_tflops_float32 = rates->float32_per_clock * per_clock / 1e12;
  c.peak_tflops_bfloat16 = rates->bfloat16_per_clock * per_clock / 1e12;
  c.intra_node_bandwidth_GBps = 25;  // PCIe 4.0 x16 (local_gpu_site.hpp)
  c.intra_node_latency_us = 10;
  const std::string rates_of =
      rates->major == gpu.major && rates->minor == gpu.minor ? "" : ", at the rates of " + sm_name(rates->major, rates->minor);
  site.chosen_by = "site local-gpu, described from this machine's " + std::to_string(gpus) + " GPU(s): " + gpu.name +
                   " (" + arch + rates_of + ", " + std::to_string(gpu.multiprocessors) + " SMs at " +
                   fmt::format("{:.0f}", gpu.max_clock_hz / 1e6) + " MHz: " + fmt::format("{:.0f}", c.peak_tflops_bfloat16) +
                   " TFLOP/s bf16, " + fmt::format("{:.1f}", c.peak_tflops_float32) + " float32; " +
                   fmt::format("{:.1f}", c.memory_gib) + " GiB), because the job runs on CUDA and neither --site nor "
                   "AXONN_SITE_CONFIG names a site (a site config is more exact: links, efficiency)";
  return site;
}

std::optional<RunSite> local_gpu_site(const RunSite& builtin, const std::string& job_device) {
  if (job_device == "cpu") return std::nullopt;
  const int gpus = cuda_device_count();
  if (gpus == 0) return std::nullopt;
  return describe_gpu_site(builtin, cuda_device_info(0), gpus);
}

}  // namespace axonn
