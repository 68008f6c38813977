#pragma once
// What the single-rank training benchmarks (bench_train_cpu, bench_train_gpu) share: the
// exchange of a one-rank job, the benchmark's training config, and running their PyTorch side
// (bench/torch_gpt.py's flags) as a subprocess.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/exchange.hpp"
#include "subprocess.hpp"
#include "config/job_config.hpp"

namespace axonn::bench {

// The exchange of one rank: a one-rank grid has only single-rank groups, so it is never asked
// for anything but its rank and size (each NCCL group's leader is this rank).
class SoloExchange final : public Exchange {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void put(const std::string&, const std::vector<char>&) override {}
  void fence() override {}
  std::vector<char> get(int, const std::string& key) override {
    throw std::runtime_error("SoloExchange: no other rank to get '" + key + "' from");
  }
};

// The step both sides time: AdamW (lr 3e-4 in warm-up, decay 0.1), clipping at 1.0, a
// schedule that never ends during a benchmark, no activation recomputation (as PyTorch's
// side), the optimizer unsharded (one rank). `source` names the benchmark in messages.
inline JobConfig bench_train_job(const std::string& source, const ModelShape& shape, int batch, int micro_batch,
                                 Recompute recompute = Recompute::none) {
  JobConfig job;
  job.source = source;
  job.model = shape;
  job.training.global_batch = batch;
  job.training.micro_batch = micro_batch;
  job.training.steps = 1'000'000;
  job.training.lr = 3e-4;
  job.training.warmup_steps = 10;
  job.training.weight_decay = 0.1;
  job.training.grad_clip = 1.0;
  job.training.recompute = recompute;
  job.training.shard_optimizer = false;  // one rank: nothing to shard
  job.training.overlap_comm = false;     // nor anything to overlap
  return job;
}

// bench/torch_gpt.py's model flags for `shape`.
inline std::string torch_model_flags(const ModelShape& m, int batch, int micro_batch) {
  std::string flags = " --layers " + std::to_string(m.layers) + " --hidden " + std::to_string(m.hidden) + " --heads " +
                      std::to_string(m.heads) + " --vocab " + std::to_string(m.vocab) + " --sequence " +
                      std::to_string(m.sequence) + " --batch " + std::to_string(batch) + " --micro-batch " +
                      std::to_string(micro_batch);
  if (m.positions == Positions::rope)  // a Llama: RMSNorm, SwiGLU, RoPE, no biases (torch_gpt.py's make_llama)
    flags += " --architecture llama --kv-heads " + std::to_string(m.kv()) + " --mlp-hidden " + std::to_string(m.ffn()) +
             " --rope-theta " + std::to_string(m.rope_theta) + " --norm-eps " + std::to_string(m.norm_eps) +
             (m.tie_embeddings ? " --tied" : "");
  return flags;
}

}  // namespace axonn::bench
