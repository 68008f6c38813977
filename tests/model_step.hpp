#pragma once
// One training step of the 4D-parallel GPT (trainer/model) on ranks that are threads of this
// process, over the real Gloo communicators, on any backend: test_trainer_model runs it on
// the CPU backend, test_trainer_model_emulated on the emulated CUDA one (tests/cuda_emulator).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_grid.hpp"
#include "layout/layout.hpp"
#include "layout/model_plan.hpp"
#include "trainer/backend.hpp"
#include "trainer/model/parameters.hpp"

namespace axonn::test {

// Tokens of global sequence s, position t: a fixed pseudo-random pattern.
int32_t token_at(int64_t s, int64_t t, int vocab);

// Row-major offset of `rect`'s element `i` (row-major over rect.count) in the global tensor.
int64_t global_index(const std::vector<int64_t>& shape, const Rect& rect, int64_t i);

struct StepResult {
  double loss = 0;
  double grad_norm = 0;
  std::map<std::string, std::vector<float>> grads;  // assembled global tensors
};

// A backend for one rank (called on that rank's thread).
using BackendFactory = std::function<std::unique_ptr<Backend>()>;
std::unique_ptr<Backend> one_thread_cpu_backend();

// How each rank computes and communicates.
struct RankSetup {
  BackendFactory make_backend = one_thread_cpu_backend;
  CommBackend comm = CommBackend::gloo;
  // NCCL: the backend's compute stream, which the grid orders its collectives with.
  std::function<void*(Backend&)> compute_stream;
  // training.recompute: what the forward keeps for the backward.
  Recompute recompute = Recompute::none;
  // training.shard_optimizer (run_steps only: run_step reads every synchronized gradient,
  // which a sharded step leaves only in each rank's pieces).
  bool shard_optimizer = false;
  // training.tp_chunks: the row chunks of the linear layers' x and y all-reduces.
  int tp_chunks = 1;
};

// One step's forward/backward and gradient synchronization (lr = 0, so weights stay) at
// `layout`, ranks as threads; gradients assembled from every rank's shard, and replicas
// checked to agree exactly; each rank's counted bytes and calls checked against the layout
// model's (at setup.recompute). overlap: training.overlap_comm.
StepResult run_step(const ModelShape& model, const Layout& layout, int global_batch, int micro_batch,
                    bool overlap = false, const RankSetup& setup = {});

// Loss, gradient norm and every gradient element of `got` are `want`'s bits; `what` names the
// comparison in failures (gtest assertions of the calling test).
void expect_same_bits(const StepResult& got, const StepResult& want, const std::string& what);

struct TrainResult {
  std::vector<double> losses, grad_norms;  // per step
  // Every tensor of the training state after the last step, assembled from every rank's
  // slices (state_slices): parameters at their names, moments at "adam.m/<name>", "adam.v/<name>".
  std::map<std::string, std::vector<float>> state;
};

// `steps` optimizer steps (AdamW at lr 1e-2 with weight decay 0.1, clipping at grad_clip, 0:
// off) at `layout`, ranks as threads, step s on sequences [s·B, (s+1)·B) of token_at; the
// optimizer sharded as setup.shard_optimizer says. Replicas are checked to agree exactly, and
// each rank's counted bytes and calls against the layout model's for that many steps.
TrainResult run_steps(const ModelShape& model, const Layout& layout, int global_batch, int micro_batch, int steps,
                      double grad_clip, bool overlap = false, const RankSetup& setup = {});

// The largest |got - want| over every element of every tensor, and where.
struct StateDifference {
  float largest = 0;
  std::string where;
};
StateDifference state_difference(const TrainResult& got, const TrainResult& want);

}  // namespace axonn::test
