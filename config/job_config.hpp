#pragma once
// A training job (job_templates/*.toml). Merge order, lowest first:
//   1. built-in defaults (the initializers below),
//   2. the site config's policy: default_dtype and checkpoint_dir fill what the job leaves out,
//   3. the job TOML,
//   4. command-line overrides "section.key=value" (e.g. training.steps=20).
// Paths: checkpoint.dir and run.dir, when relative, resolve against the current working
// directory at load time, so two runs started in two directories never collide;
// data.path, when relative, resolves against the job TOML's own folder, so a template
// finds the data shipped beside it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/site_config.hpp"
#include "layout/layout_inputs.hpp"

namespace axonn {

struct TrainingConfig {
  int global_batch = 8;  // sequences per optimizer step
  int micro_batch = 1;   // sequences per forward/backward per rank, upper bound
  int steps = 100;
  double lr = 3e-4;      // peak
  double min_lr = 3e-5;  // end of the cosine decay
  int warmup_steps = 10;
  std::string schedule = "cosine";  // "cosine" | "constant"
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global norm; 0 disables
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  uint64_t seed = 1337;
  // float32 (exact, any device) or bfloat16 (CUDA only): bf16 GEMMs on tensor cores, and
  // activations, their gradients and the GEMMs' copy of the weights stored in bf16.
  // Parameters, their gradients, Adam moments and checkpoints are float32 either way.
  ElementType dtype = ElementType::float32;
  // Where each rank computes: "cuda" (GPU local_rank of its node, NCCL collectives), "cpu"
  // (float32 on the host, Gloo collectives), or "auto": cuda when this build has the CUDA
  // backend and the rank sees a GPU, else cpu.
  std::string device = "auto";
  // Run the z all-gathers of the forward, the z reduce-scatters of the weight gradients and
  // the data-parallel gradient all-reduce of the last micro-batch beside compute (a communicator thread on Gloo, the
  // communicator's stream on NCCL). false: the same collectives in the same order, each waited for where it is issued.
  // "auto" (unset): overlapped unless calibrate measured that it costs on a tier those axes use
  // (layout/comm_overlap.hpp). Either way the results are bit for bit the same.
  std::optional<bool> overlap_comm;
  // Each micro-batch's rows in this many equal chunks for the linear layers' x and y
  // all-reduces, chunk i's beside chunk i+1's GEMM (layout_inputs.hpp, BatchShape::tp_chunks);
  // BatchShape::kAutoTpChunks ("auto"): the layout model's fastest count per layout. Chunks
  // change when the sums run and, over groups of more than 2, their order (within float32
  // rounding); never which bytes move.
  int tp_chunks = 1;
  // Activation recomputation (layout_inputs.hpp, Recompute): "none", "attention", "block", or
  // "auto" (unset): the layout model picks per layout the least recomputation that fits in
  // the site's memory (resolved_recompute). Either way the results are bit for bit the same.
  std::optional<Recompute> recompute;
  // Optimizer state sharded over the data axis (ZeRO stage 1; layout_inputs.hpp, MemoryModes):
  // true, false, or "auto" (unset): the layout model shards where that makes the layout fit,
  // or fit with less recomputation (resolved_modes). Either way the same losses and weights,
  // up to the summation order of the gradient reduce-scatter (docs/parallel-plan.md).
  std::optional<bool> shard_optimizer;
};

// One token stream of the training data and its share of the samples.
struct DataSourceConfig {
  std::string path;             // absolute after loading; empty: the built-in corpus
  std::string format = "auto";  // "auto" | "tokens" | "text" | "megatron" (trainer/data/token_data.hpp)
  double weight = 1;            // relative to the other sources' (trainer/data/data_mixture.hpp)
  bool operator==(const DataSourceConfig&) const = default;
};

struct DataConfig {
  // [data] path and format: the one source of a job without [[data.sources]].
  std::string path;             // absolute after loading; empty: the built-in corpus
  std::string format = "auto";  // "auto" | "tokens" | "text" | "megatron" (trainer/data/token_data.hpp)
  // [[data.sources]]: a weighted mixture; empty for one source (path, format).
  std::vector<DataSourceConfig> sources;
  // Held-out data for run.eval_interval: a file of its own (valid, valid_format), or the last
  // valid_fraction of every source's samples (then not trained on); neither by default.
  std::string valid;  // absolute after loading
  std::string valid_format = "auto";
  double valid_fraction = 0;

  // What trains: `sources`, or the one source of path and format.
  std::vector<DataSourceConfig> training_sources() const;
  bool held_out() const { return !valid.empty() || valid_fraction > 0; }
};

struct CheckpointConfig {
  std::string dir;   // absolute after loading
  int interval = 0;  // steps between saves; 0: only at the end and on preemption
  int keep = 2;      // committed steps kept
  // Every this many steps (0: never; kAutoMemoryInterval, "auto": as often as keeps the copies
  // within 2% of training time, measured by the run, trainer/train/memory_interval.hpp) each
  // rank copies its shard of the state into its node's memory and a rank's on another node
  // (trainer/train/memory_copies.hpp): a restart after a failure loads the newest step whose
  // every shard survived instead of the disk's.
  int memory_interval = 0;
  static constexpr int kAutoMemoryInterval = -1;
  bool memory_copies() const { return memory_interval != 0; }
  // The job's interval; nullopt for "auto".
  std::optional<int> fixed_memory_interval() const {
    return memory_interval == kAutoMemoryInterval ? std::nullopt : std::optional<int>(memory_interval);
  }
  // Where the node's memory copies live: a directory in RAM (tmpfs). Each job's are in
  // <memory_dir>/axonn-<job>/<host>, removed when the job ends.
  std::string memory_dir = "/dev/shm";
};

// Steps first..last (1-based, as metrics.jsonl numbers them), both included.
struct StepRange {
  int64_t first = 0, last = 0;
  bool contains(int64_t step) const { return first <= step && step <= last; }
  bool operator==(const StepRange&) const = default;
};
// "12" or "10-12"; ConfigError naming `key` and the text otherwise.
StepRange parse_step_range(const std::string& key, const std::string& text);

struct RunConfig {
  std::string dir = "runs/axonn";  // metrics and logs; absolute after loading
  int log_interval = 1;
  // Steps whose timeline every rank writes to <dir>/trace/rank-NNNNN.json (run.trace_steps,
  // "10-12"); none when unset.
  std::optional<StepRange> trace_steps;
  // Rank 0 names a rank whose step time outside blocking collectives stays above this many
  // times the median rank's for 3 log intervals in a row (trainer/train/straggler_watch.hpp).
  double straggler_factor = 1.2;
  // The signal that asks `axonn train` to save at the next step boundary and exit 75
  // (besides SIGTERM and SIGINT, which always do): "USR1" | "USR2" | "HUP"; the site's
  // policy.preempt_signal when the job does not say. The others of the three keep their
  // default action, so a library's handler for them (NCCL's proxy dump) is left alone.
  std::string preempt_signal = "USR1";
  // Every this many steps (0: never) the held-out data's loss (data.valid or
  // data.valid_fraction) over eval_batches global batches, logged and in metrics.jsonl.
  int eval_interval = 0;
  int eval_batches = 1;
  // After a failure, start the job again inside its allocation (the sbatch templates) or its
  // launcher (the default of `axonn run --max-restarts`) up to this many times, resuming from
  // the newest checkpoint on the nodes that still respond.
  int max_restarts = 0;
  // Nodes of the allocation the templates hold back at the start, to replace lost ones in a
  // restart (sbatch --nodes=N-M gives N..M; the job runs on all but spare_nodes of them).
  int spare_nodes = 0;
};

struct JobConfig {
  std::string source;  // file it was loaded from
  ModelShape model;
  TrainingConfig training;
  DataConfig data;
  CheckpointConfig checkpoint;
  RunConfig run;
};

// "auto" for unset, else recompute_name.
std::string recompute_setting_name(const std::optional<Recompute>& recompute);
// "auto" for unset, else "true" or "false".
std::string shard_setting_name(const std::optional<bool>& shard_optimizer);
// model.moe_chunks as the job file writes it: "auto" or the count.
std::string moe_chunks_name(const ModelShape& model);

// SIGUSR1, SIGUSR2, SIGHUP for "USR1", "USR2", "HUP" (run.preempt_signal's values).
int preempt_signal_number(const std::string& name);

JobConfig load_job_config(const std::string& path, const SiteConfig& site,
                          const std::vector<std::string>& overrides = {});
// `name` stands for the file in messages; relative data paths resolve against the cwd.
JobConfig load_job_config_string(const std::string& text, const std::string& name, const SiteConfig& site,
                                 const std::vector<std::string>& overrides = {});

// The chooser's view of a site and a job on `nodes` nodes with `tasks_per_node` ranks each
// (units converted: GiB -> bytes, GB/s -> bytes/s, us -> s, TFLOP/s -> FLOP/s at the job's dtype).
// hostnames (node order, optional) place the nodes on the site's named switches
// (network.switches); see allocation_nodes_per_switch in switch_map.hpp.
// A job on the CPU (training.device = "cpu") has its node's tasks share the node's cores and
// memory bandwidth: a site's per-"GPU" compute figures describe one of gpus_per_node shares
// of a node, so each of tasks_per_node ranks is priced with gpus_per_node / tasks_per_node of
// them (twice a share's rate for 2 ranks on a gpus_per_node = 4 site), and bias and GELU as
// passes of their own (no GEMM epilogues). `axonn train` prices the device its ranks run on
// ("auto" resolved), so that its chooser, its logged prediction and summary.json agree.
ChooserInput chooser_input(const SiteConfig& site, const JobConfig& job, int nodes, int tasks_per_node,
                           const std::vector<std::string>& hostnames = {});

}  // namespace axonn
