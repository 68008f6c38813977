// `axonn calibrate` on GPU ranks (label gpu): the CUDA backend's GEMMs in the job's dtype and,
// with two GPUs, NCCL's links, as a user runs it (axonn run -n N). Without a GPU each test
// skips saying why. The same tests run on the CUDA emulation (emulated.CalibrateGpu.*,
// tests/cuda_emulator/), where one process has one emulated GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "comm/cuda_device.hpp"
#include "config/site_config.hpp"
#include "cuda_skip.hpp"
#include "process_helpers.hpp"
#include "scratch_dir.hpp"

namespace axonn {
namespace {

using test::contains;
using test::kAxonn;
using test::kSourceDir;
using test::run_command;

class CalibrateGpu : public test::ScratchDirTest {
 protected:
  // The tiny job on CUDA in `dtype`.
  std::string cuda_job(const std::string& dtype) const {
    std::stringstream template_text;
    template_text << std::ifstream(kSourceDir + "/job_templates/tiny.toml").rdbuf();
    const std::string text = template_text.str();
    return write("job-" + dtype + ".toml",
                 std::regex_replace(std::regex_replace(text, std::regex("device = \"cpu\""), "device = \"cuda\""),
                                    std::regex("dtype = \"float32\""), "dtype = \"" + dtype + "\""));
  }
};

TEST_F(CalibrateGpu, OneRankMeasuresTheJobsGemmsInBfloat16OnTheCudaBackend) {
  REQUIRE_CUDA_DEVICES(1);
  const std::string out = path("gpu.toml");
  const auto r = run_command(kAxonn + " run -n 1 calibrate --quick --site " + kSourceDir +
                                 "/site_configs/dgx-h100.toml --job " + cuda_job("bfloat16") + " --output " + out,
                             300);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "GEMM shape(s) in bfloat16")) << r.output;
  EXPECT_TRUE(contains(r.output, "not measured, keys kept from the base site: intra-node: one rank per node"))
      << r.output;
  const SiteConfig site = load_site_config(out);
  EXPECT_GT(site.gemm_tflops_bfloat16, 0);
  EXPECT_EQ(site.gemm_tflops_float32, 0);
  EXPECT_GT(site.attention_tflops_bfloat16, 0);
  ASSERT_FALSE(site.gemm.empty());
  for (const SiteGemm& g : site.gemm) EXPECT_EQ(g.dtype, ElementType::bfloat16);
  EXPECT_GT(site.elementwise_GBps, 0);
  const double gpu_gib = cuda_device_info(0).memory_bytes / (1024.0 * 1024.0 * 1024.0);
  EXPECT_NEAR(site.memory_gib, gpu_gib, 1e-6 * gpu_gib) << "the GPU's memory (gathered as float32: 7 digits)";
  EXPECT_TRUE(contains(site.calibration.device, "backend cuda")) << site.calibration.device;
  EXPECT_TRUE(contains(site.calibration.device, "collectives nccl")) << site.calibration.device;
  EXPECT_EQ(site.name, "dgx-h100");
}

TEST_F(CalibrateGpu, TwoRanksFitNcclOnEveryKind) {
  REQUIRE_CUDA_DEVICES(2);
  const std::string out = path("gpu2.toml");
  const auto r = run_command(kAxonn + " run -n 2 calibrate --quick --max-residual 100 --job " + cuda_job("float32") +
                                 " --output " + out,
                             300);
  ASSERT_EQ(r.code, 0) << r.output;
  const SiteConfig site = load_site_config(out);
  for (const CollectiveKind k : kCalibratedKinds) {
    const auto& fit = site.intra_node_fits[static_cast<size_t>(k)];
    ASSERT_TRUE(fit.has_value()) << collective_name(k);
    EXPECT_GT(fit->bandwidth_GBps, 0) << collective_name(k);
  }
  EXPECT_GT(site.gemm_tflops_float32, 0);
}

}  // namespace
}  // namespace axonn
