#pragma once
// The site of a job run on this machine's GPUs with no site config named. The built-in
// laptop-cpu site describes CPU ranks (40 GFLOP/s, 4 GiB each); priced with it, a GPU job's
// predicted step is the CPU's (hundreds of times too long), its MFU is against the CPU's
// peak, and a model that fits an 80 GB GPU "does not fit". So when neither --site nor
// AXONN_SITE_CONFIG names a site and the job's ranks run on CUDA (training.device = "cuda",
// or "auto" with a GPU visible), the site is described from GPU 0 as the CUDA runtime reports
// it: GPUs per node = the GPUs visible, memory = the GPU's, peaks from its architecture,
// multiprocessors and maximum clock (config/gpu_rates.hpp). The links between GPUs of one
// machine are not reported: they are priced as PCIe 4.0 x16 (25 GB/s each way, 10 us), the
// slowest that joins GPUs, so that NVLink machines are underestimated rather than over.
// The rest (efficiency, policy) is the built-in site's. A site file (--site) is more exact.
#include <optional>
#include <string>

#include "runner/cli/train_inputs.hpp"
#include "comm/cuda_device.hpp"
#include "config/site_config.hpp"

namespace axonn {

// The built-in site `builtin` with its node, compute and intra-node network replaced by
// `gpus` GPUs like `gpu`. Throws ConfigError for a GPU older than sm_80 (no bf16 tensor
// cores, which the CUDA backend needs), naming it and the fix (--site).
RunSite describe_gpu_site(const RunSite& builtin, const CudaDeviceInfo& gpu, int gpus);

// describe_gpu_site of this machine's GPU 0 when `job_device` ("cpu", "cuda", "auto") runs
// on a GPU here; nullopt for "cpu" or where no GPU is visible (then the CPU site stands, and
// "cuda" fails later naming why there is no GPU).
std::optional<RunSite> local_gpu_site(const RunSite& builtin, const std::string& job_device);

}  // namespace axonn
