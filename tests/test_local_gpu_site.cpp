// The site of a GPU job with no site config named (runner/cli/local_gpu_site.hpp): peaks from
// the GPU's architecture, multiprocessors and clock (config/gpu_rates.hpp), its memory, and
// the built-in site's policy; a GPU older than sm_80 is refused naming the fix.
#include <gtest/gtest.h>

#include "runner/cli/local_gpu_site.hpp"
#include "config/config_error.hpp"
#include "config/gpu_rates.hpp"

namespace axonn {
namespace {

CudaDeviceInfo gpu(const std::string& name, int major, int minor, int sms, double mhz, double gib) {
  CudaDeviceInfo g;
  g.name = name;
  g.major = major;
  g.minor = minor;
  g.multiprocessors = sms;
  g.max_clock_hz = mhz * 1e6;
  g.memory_bytes = gib * 1024 * 1024 * 1024;
  return g;
}

RunSite builtin() {
  RunSite s;
  s.config.name = "laptop-cpu";
  s.config.peak_tflops_float32 = 0.04;
  s.config.peak_tflops_bfloat16 = 0.04;
  s.config.memory_gib = 4;
  s.config.gpus_per_node = 4;
  s.config.efficiency = 0.5;
  s.config.memory_headroom = 0.2;
  s.builtin = true;
  return s;
}

TEST(GpuRates, PublishedPeaksFollowFromSmsAndClock) {
  // A100 SXM: 108 SMs at 1.41 GHz, 312 TFLOP/s bf16 and 19.5 float32 quoted.
  const GpuArchRates* a100 = gpu_arch_rates(8, 0);
  ASSERT_NE(a100, nullptr);
  EXPECT_NEAR(a100->bfloat16_per_clock * 108 * 1.41e9 / 1e12, 312, 1);
  EXPECT_NEAR(a100->float32_per_clock * 108 * 1.41e9 / 1e12, 19.5, 0.1);
  // H100 SXM: 989 TFLOP/s bf16 quoted at 1.83 GHz, 132 SMs.
  const GpuArchRates* h100 = gpu_arch_rates(9, 0);
  ASSERT_NE(h100, nullptr);
  EXPECT_NEAR(h100->bfloat16_per_clock * 132 * 1.83e9 / 1e12, 989, 1);
}

TEST(GpuRates, AnUnlistedArchitectureTakesTheNearestOlderRowAndPreAmpereHasNone) {
  EXPECT_EQ(gpu_arch_rates(8, 7), gpu_arch_rates(8, 6));   // Jetson Orin: A10's rates
  EXPECT_EQ(gpu_arch_rates(12, 0), gpu_arch_rates(10, 0)); // newer than the table
  EXPECT_EQ(gpu_arch_rates(7, 0), nullptr);                // V100: no bf16 tensor cores
  EXPECT_EQ(sm_name(9, 0), "sm_90");
}

TEST(LocalGpuSite, DescribesTheGpuAndKeepsTheBuiltInPolicy) {
  const RunSite site = describe_gpu_site(builtin(), gpu("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980, 79.2), 8);
  EXPECT_EQ(site.config.name, "local-gpu");
  EXPECT_EQ(site.config.gpus_per_node, 8);
  EXPECT_NEAR(site.config.memory_gib, 79.2, 1e-9);
  EXPECT_NEAR(site.config.peak_tflops_bfloat16, 4096 * 132 * 1.98e9 / 1e12, 1e-6);  // 1071
  EXPECT_NEAR(site.config.peak_tflops_float32, 256 * 132 * 1.98e9 / 1e12, 1e-6);    // 66.9
  EXPECT_DOUBLE_EQ(site.config.efficiency, 0.5);
  EXPECT_DOUBLE_EQ(site.config.memory_headroom, 0.2);
  EXPECT_TRUE(site.builtin);
  EXPECT_NE(site.chosen_by.find("site local-gpu, described from this machine's 8 GPU(s): NVIDIA H100 80GB HBM3 "
                                "(sm_90, 132 SMs at 1980 MHz: 1071 TFLOP/s bf16, 66.9 float32; 79.2 GiB)"),
            std::string::npos)
      << site.chosen_by;
}

TEST(LocalGpuSite, ANewerGpuSaysWhoseRatesItGets) {
  const RunSite site = describe_gpu_site(builtin(), gpu("NVIDIA RTX PRO 6000", 12, 0, 188, 2617, 95), 1);
  EXPECT_NE(site.chosen_by.find("(sm_120, at the rates of sm_100, 188 SMs"), std::string::npos) << site.chosen_by;
}

TEST(LocalGpuSite, AGpuWithoutBf16TensorCoresIsRefusedNamingTheFix) {
  try {
    describe_gpu_site(builtin(), gpu("Tesla V100-SXM2-32GB", 7, 0, 80, 1530, 32), 1);
    FAIL() << "a V100 was described";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Tesla V100-SXM2-32GB (sm_70), older than sm_80"), std::string::npos) << what;
    EXPECT_NE(what.find("--site"), std::string::npos) << what;
    EXPECT_NE(what.find("training.device = \"cpu\""), std::string::npos) << what;
  }
}

TEST(LocalGpuSite, ACpuJobKeepsTheBuiltInSite) { EXPECT_FALSE(local_gpu_site(builtin(), "cpu").has_value()); }

}  // namespace
}  // namespace axonn
