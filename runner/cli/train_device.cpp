#include "runner/cli/train_device.hpp"

#include <algorithm>
#include <thread>

#include "config/config_error.hpp"
#include "trainer/cpu/cpu_backend.hpp"
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn {

namespace {

GemmMath gemm_math_of(ElementType dtype) { return dtype == ElementType::bfloat16 ? GemmMath::bf16 : GemmMath::fp32; }

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

}  // namespace

TrainDevice choose_train_device(const JobConfig& job, const Topology& topology) {
  const std::string& asked = job.training.device;
  const std::string setting = "training.device = " + quoted(asked);
  const std::string key = job.source + ": " + setting;
  // "cpu" leaves the CUDA runtime alone (on a GPU node, initializing it costs time and memory).
  std::string why_none = "not looked for";
  const int gpus = asked == "cpu" ? 0 : cuda_device_count(&why_none);
  TrainDevice device;
  device.gpus = gpus;
  device.cuda = asked == "cuda" || (asked == "auto" && gpus > 0);
  if (device.cuda) {
    if (gpus == 0)
      throw ConfigError(key + " but rank " + std::to_string(topology.rank) + " on " + topology.hostname() +
                        " sees no CUDA device (" + why_none +
                        "); run where GPUs are visible (srun --gpus-per-node, CUDA_VISIBLE_DEVICES) or set "
                        "training.device = \"cpu\" (float32) or \"auto\"");
    // NCCL refuses two ranks of one communicator on one GPU, and the world communicator
    // holds every rank: a node may not have more ranks than GPUs.
    if (topology.local_size > gpus)
      throw ConfigError(key + ": " + std::to_string(topology.local_size) + " ranks on " + topology.hostname() +
                        " but only " + std::to_string(gpus) +
                        " CUDA device(s) there; NCCL needs one GPU per rank: "
                        "start at most " +
                        std::to_string(gpus) +
                        " tasks per node (srun --ntasks-per-node, axonn run -n), or set training.device = \"cpu\"");
    device.gpu = topology.local_rank % gpus;
    device.collectives = CommBackend::nccl;
    device.decided_by = asked == "auto" ? setting + ": " + std::to_string(gpus) + " CUDA device(s) visible" : setting;
    return device;
  }
  device.decided_by = asked == "auto" ? setting + ": no CUDA device (" + why_none + ")" : setting;
  if (job.training.dtype != ElementType::float32)
    throw ConfigError(job.source + ": training.dtype = " + quoted(element_type_name(job.training.dtype)) +
                      " needs the CUDA backend, and this rank computes on the CPU (" + device.decided_by +
                      "), which has float32 only; set training.dtype = \"float32\", or run on GPUs with "
                      "training.device = \"auto\" or \"cuda\"");
  device.cpu_threads = std::max(1, host_cores() / std::max(1, topology.local_size));
  return device;
}

int host_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::unique_ptr<Backend> make_train_backend(const TrainDevice& device, const JobConfig& job, const Topology& topology) {
  if (!device.cuda) return make_cpu_backend(device.cpu_threads);
  select_cuda_device(device.gpu, topology.local_size);
  CudaBackendOptions options;
  options.device = device.gpu;
  options.gemm_math = gemm_math_of(job.training.dtype);
  options.activations = job.training.dtype;
  return make_cuda_backend(options);
}

void* train_compute_stream(Backend& backend) { return backend.device_is_host() ? nullptr : cuda_stream_of(backend); }

std::string describe_train_device(const TrainDevice& device, const JobConfig& job) {
  const std::string comm = std::string(", collectives ") + comm_backend_name(device.collectives);
  if (!device.cuda)
    return "backend cpu (float32, " + std::to_string(device.cpu_threads) + " thread" +
           (device.cpu_threads == 1 ? "" : "s") + ")" + comm;
  return "backend cuda (GPU " + std::to_string(device.gpu) + " of " + std::to_string(device.gpus) + ", GEMMs " +
         gemm_math_name(gemm_math_of(job.training.dtype)) + ", activations " + element_type_name(job.training.dtype) +
         ")" + comm;
}

}  // namespace axonn
