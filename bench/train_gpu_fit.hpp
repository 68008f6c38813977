#pragma once
// bench_train_gpu --fit: what fits on one GPU, ours against PyTorch in the same call. For each
// model, bf16 (training.dtype = "bfloat16"),
//   - the largest micro-batch at the model's T (1024): 1, 2, 4, ... up to --max-micro-batch,
//   - the largest sequence at micro-batch 1: T, 2T, 4T, ... up to --max-sequence,
// each candidate with the activation recomputation the chooser picks for it on this GPU's
// memory (resolved_recompute, as `axonn train` with training.recompute = "auto"), and the
// chooser's predicted bytes beside. A candidate fits when one optimizer step runs (our
// trainer with its weights left at zero: their values do not change what is allocated); the
// search stops at the first that does not, and prints why (the allocation that failed).
// PyTorch's side (bench/train_gpu_fit_torch.py) tries the same candidates with the same
// recomputation as activation checkpointing, in eager mode (compiling each shape would take
// minutes). Goal: ours at least PyTorch's on every row.
#include <string>
#include <vector>

#include "comm/cuda_device.hpp"
#include "gpu_models.hpp"
#include "trainer/cuda/cuda_backend.hpp"

namespace axonn::bench {

struct FitOptions {
  std::vector<GpuModel> models;
  int max_micro_batch = 1024;
  int max_sequence = 65536;
  std::string python = "python3";
  bool torch = true;
};

// Runs both searches for every model, each try on a CUDA backend of `backend` (GPU 0, bf16
// activations) of its own, and prints each try and the table.
void run_fit(const CudaBackendOptions& backend, const CudaDeviceInfo& gpu, const FitOptions& o);

}  // namespace axonn::bench
