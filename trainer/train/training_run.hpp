#pragma once
// A whole training run of one rank: hold the checkpoint directory (run_directory.hpp), resume
// from its `latest` (at whatever layout this run has; from the newest step that verifies when
// `latest` is lost), train to training.steps, save every checkpoint.interval
// steps and at the end, stop early when any rank asks (a preemption signal: the ranks agree
// at the next step boundary, save, and return `preempted`). Rank 0 logs each step and
// appends it to <run.dir>/metrics.jsonl; at the end every rank checks its counted bytes
// against the layout model and reports its memory beside the prediction, and rank 0 writes
// <run.dir>/summary.json, with the startup phases (when each was reached after process start)
// and, in a run restarted after a failure, the recovery's phases (recovery_report.hpp).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/dir_lock.hpp"
#include "comm/comm_grid.hpp"
#include "config/job_config.hpp"
#include "trainer/backend.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/train/memory_copies.hpp"
#include "trainer/train/recovery_report.hpp"
#include "trainer/train/startup_times.hpp"

namespace axonn {

struct TrainingRunOptions {
  ChooserInput plan;                      // model, batch and machine: predicted time, memory, bytes
  std::string layout_origin;              // one line: where the layout came from and why
  bool fallback = false;                  // resume from an older step when the newest is unusable
  bool data_changed = false;              // resume on other data than the checkpoint's (data_position.hpp)
  bool init_only = false;                 // save the initial state as step 0 and return, no training
  LockOwner lock_owner;                   // rank 0 holds the checkpoint directory's lock as this owner
  bool break_lock = false;                // take over a lock record another host left (dir_lock.hpp)
  std::string save_token;                 // the same on every rank of this run
  std::function<bool()> stop_requested;   // this rank caught a preemption signal (may be empty)
  StartupTimes startup;                   // the caller's phases; the run adds model_init, checkpoint_loaded, first_step
  std::vector<std::string> rank_hosts;    // [world] each rank's host, for the straggler watch's message
  std::optional<RecoveryTimes> recovery;  // a restart after a failure: rank 0 reports the recovery
  // With memory copies (checkpoint.memory_interval a count or "auto"): where this rank's node
  // keeps the copies, and the link they travel over (memory_copies.hpp); the run resumes from
  // them when they are newer.
  std::optional<MemoryCopyPlan> memory;
  PeerLink* peers = nullptr;
};

struct TrainingRunResult {
  int64_t start_step = 0;  // 0, or the step resumed from
  int64_t end_step = 0;    // optimizer steps done when the run returned
  bool preempted = false;  // stopped before training.steps, after a committed save
  double last_loss = 0;
  bool comm_bytes_match = false;  // on every rank, counted bytes == predicted bytes
  bool already_finished = false;  // the checkpoint was at training.steps already: nothing was done
};

TrainingRunResult run_training(Backend& backend, CommGrid& grid, const JobConfig& job, const TrainingData& data,
                               const TrainingRunOptions& options);

}  // namespace axonn
