#pragma once
// What a finished run reports besides its losses: the bytes each rank moved against the
// layout model's prediction (docs/parallel-plan.md; they must be equal), each rank's memory
// against the model's memory estimate, and <run.dir>/summary.json for tools and tests.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm_grid.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_volume.hpp"
#include "trainer/train/comm_profile.hpp"
#include "trainer/train/recovery_report.hpp"

namespace axonn {

// Every (axis, kind) whose counted bytes or calls differ from `steps` x the prediction, as
// "x all_reduce: counted 1024 bytes in 4 calls, predicted 2048 in 8"; empty when all equal.
// An entry whose bytes vary with the routing (StepVolume::varies: a dropless MoE model under
// expert parallelism) is compared by its calls only: its bytes are checked summed over the
// world (routing_mismatch).
std::vector<std::string> comm_mismatches(const CommCounters& counted, const StepVolume& per_step, int64_t steps);

// The (axis, kind) entries whose bytes vary with the routing, in table order.
std::vector<std::pair<CommAxis, CollectiveKind>> routing_entries(const StepVolume& per_step);
// One such entry's bytes counted on every rank, summed, against world x steps x the
// prediction: "x all_reduce: counted 1024 bytes over the 4 ranks, predicted 2048 (4 x 512)";
// empty when equal.
std::string routing_mismatch(CommAxis axis, CollectiveKind kind, int64_t world_bytes, const StepVolume& per_step,
                             int64_t steps, int world);

// Counted time per step of each (axis, kind) with calls, "z.all_gather" -> s; empty when
// steps is 0.
std::vector<std::pair<std::string, double>> comm_seconds_per_step(const CommCounters& counted, int64_t steps);

// One line per axis with traffic: "x: all_reduce 1.2 MiB/step (12 calls), ..." for the log.
std::string comm_summary(const StepVolume& per_step);

// Counted bytes per axis, every kind summed (indexed by CommAxis).
std::array<int64_t, kCommAxisCount> counted_bytes_per_axis(const CommCounters& counted);

// One line for the log, per step and rank: "intra-node 1.500 MiB (predicted 1.500 MiB),
// inter-node 0.375 MiB (predicted 0.375 MiB)"; the tiers with bytes counted or predicted.
std::string tier_summary(const TierBytes& counted, const TierBytes& predicted, int64_t steps);

struct RunSummary {
  std::string layout;
  std::string layout_origin;
  std::string recompute;         // the activation recomputation the run used: "none", "attention", "block"
  bool shard_optimizer = false;  // the optimizer state was sharded over data
  // An MoE model's expert all-to-all: the pipelined rounds it ran in (MoeShape::rounds, with
  // model.moe_chunks decided); unset for a dense model.
  std::optional<int64_t> moe_rounds;
  int64_t start_step = 0, end_step = 0;
  bool preempted = false;
  double last_loss = 0;
  double tokens_per_s = 0;      // mean over the steps of this run
  double mfu = 0;               // mean
  double step_s_median = 0;     // rank 0's measured steps (step_time_accuracy.hpp)
  double predicted_step_s = 0;  // the layout model's
  double step_time_ratio = 0;   // step_s_median / predicted_step_s; 0 without steps
  bool comm_bytes_match = false;
  std::vector<std::string> comm_mismatches;  // of rank 0
  StepVolume predicted_per_step;             // rank 0's
  // Rank 0's bytes per link tier (indexed by LinkTier, bytes_per_tier): counted over the run,
  // and predicted per step; the run's steps divide the first.
  TierBytes counted_per_tier{};
  TierBytes predicted_per_tier{};
  int64_t steps_run = 0;
  // Rank 0's comm_seconds_per_step (a started collective's time on its communicator's
  // thread or stream, hidden or not).
  std::vector<std::pair<std::string, double>> comm_s_per_step;
  std::vector<CommProfileEntry> comm_profile;             // rank 0's, over the run (comm_profile.hpp)
  std::vector<double> model_memory_bytes;                 // per rank: peak RSS above the baseline
  std::vector<double> predicted_memory_bytes;             // per rank
  double process_start_unix_s = 0;                        // rank 0's process creation, wall clock
  std::vector<std::pair<std::string, double>> startup_s;  // rank 0's phases, seconds after it
  std::optional<RecoveryReport> recovery;                 // a run restarted after a failure
};

// Writes the summary as JSON (through a temporary file and rename).
void write_run_summary(const std::filesystem::path& path, const RunSummary& summary);

}  // namespace axonn
