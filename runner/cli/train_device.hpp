#pragma once
// Where one rank of `axonn train` computes, from the job's training.device and training.dtype:
//   "cpu"  -> the CPU backend (float32), Gloo collectives on host buffers;
//   "cuda" -> the CUDA backend on GPU local_rank of its node, NCCL collectives on device
//             buffers ordered against the backend's compute stream;
//   "auto" -> "cuda" when this build has the CUDA backend and the rank sees a GPU, else "cpu".
// training.dtype picks the GPU's precision: float32 -> exact float32 GEMMs and float32
// activations (the CPU's results up to summation order); bfloat16 -> mixed precision: bf16
// activations and weights for the GEMMs and attention on bf16 tensor cores, float32
// accumulation, float32 master weights, gradients and optimizer state. The CPU backend has
// float32 only: bfloat16 there is an error naming both fixes.
//
// This header includes no CUDA one.
#include <memory>
#include <string>

#include "comm/comm_grid.hpp"
#include "config/job_config.hpp"
#include "runner/pmix/topology.hpp"
#include "trainer/backend.hpp"

namespace axonn {

struct TrainDevice {
  bool cuda = false;
  int gpu = -1;         // this rank's GPU: local_rank % gpus; -1 on the CPU
  int gpus = 0;         // GPUs this process sees (after CUDA_VISIBLE_DEVICES); 0 with "cpu"
  int cpu_threads = 0;  // the CPU backend's threads: this node's cores / its ranks; 0 on a GPU
  CommBackend collectives = CommBackend::gloo;
  std::string decided_by;  // "training.device = \"auto\": no CUDA device (...)", for the log
};

// Throws ConfigError naming the key, the value, what this rank sees and the fix: "cuda"
// without a visible GPU, a node with more ranks than GPUs (NCCL needs one GPU per rank),
// bfloat16 on the CPU.
TrainDevice choose_train_device(const JobConfig& job, const Topology& topology);

// This host's cores as the CPU backend splits them among a node's ranks (at least 1).
int host_cores();

// The backend `device` names: the CUDA backend on device.gpu, which becomes this thread's
// current device first (NCCL's communicators, made later on this thread, are created on the
// current device), or the CPU backend with this node's cores split among its ranks.
std::unique_ptr<Backend> make_train_backend(const TrainDevice& device, const JobConfig& job, const Topology& topology);

// The backend's compute stream (a cudaStream_t) for CommGrid::order_with_compute; nullptr
// for the CPU backend.
void* train_compute_stream(Backend& backend);

// "backend cuda (GPU 0 of 8, GEMMs bf16, activations bfloat16), collectives nccl" or
// "backend cpu (float32, 2 threads), collectives gloo".
std::string describe_train_device(const TrainDevice& device, const JobConfig& job);

}  // namespace axonn
