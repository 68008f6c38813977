#include "trainer/train/training_run.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/latest_recovery.hpp"
#include "checkpoint/step_dir.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_memory.hpp"
#include "layout/layout_volume.hpp"
#include "layout/model_plan.hpp"
#include "trainer/train/host_exchange.hpp"
#include "trainer/train/memory_usage.hpp"
#include "trainer/train/metrics_log.hpp"
#include "trainer/train/run_directory.hpp"
#include "trainer/train/run_report.hpp"
#include "trainer/train/trainer.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string duration_text(double s) {
  const long total = std::lround(s);
  char buf[32];
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", total / 60, total % 60);
  return buf;
}

// When `latest` is lost while steps are committed, rank 0 verifies them (newest first) and
// every rank loads the one it picked: nullopt when `latest` is usable or nothing is committed.
// Rank 0's CheckpointError when no step verifies; the others' name rank 0.
std::optional<int64_t> recovered_step(const std::filesystem::path& dir, Backend& backend, Communicator& world,
                                      bool lead) {
  constexpr int64_t kNone = -1, kFailed = -2;
  int64_t chosen = kNone;
  std::exception_ptr failure;
  if (lead) {
    try {
      if (const std::optional<LatestRecovery> r = recover_latest(dir)) {
        chosen = r->step;
        spdlog::warn("checkpoint: {} in {}; resuming from {}, the newest committed step that verifies", r->why,
                     dir.string(), step_dir_name(r->step));
        for (const std::string& why : r->rejected) spdlog::warn("checkpoint:   skipped {}", why);
      }
    } catch (const CheckpointError&) {
      failure = std::current_exception();
      chosen = kFailed;
    }
  }
  chosen = all_gather_steps(backend, world, chosen).front();
  if (failure) std::rethrow_exception(failure);
  if (chosen == kFailed)
    throw CheckpointError(dir.string(), "resume",
                          "rank 0 found no committed step to resume from in " + dir.string() + " (its message says why)");
  if (chosen == kNone) return std::nullopt;
  return chosen;
}

// Resume from the checkpoint directory; returns the step resumed from (0 for a fresh start).
int64_t resume(TrainingCheckpoint& checkpoint, Backend& backend, Communicator& world, bool fallback, bool lead) {
  const std::optional<int64_t> recovered = recovered_step(checkpoint.dir(), backend, world, lead);
  std::optional<LoadResult> loaded = checkpoint.load(fallback, recovered);
  if (fallback) {
    // After a fallback load, ranks may have landed on different steps (each reads other
    // shards): all take the oldest.
    const std::vector<int64_t> steps = all_gather_steps(backend, world, loaded ? loaded->step : -1);
    const int64_t oldest = *std::min_element(steps.begin(), steps.end());
    if (loaded && oldest != loaded->step) loaded = checkpoint.load(false, oldest);
  }
  if (!loaded) {
    if (lead) spdlog::info("checkpoint: none in {}; starting from the initial weights", checkpoint.dir().string());
    return 0;
  }
  if (loaded->fell_back) {
    spdlog::warn("checkpoint: FELL BACK to {} (--fallback): the newer steps could not be loaded:",
                 loaded->step_dir.string());
    for (const auto& why : loaded->skipped) spdlog::warn("checkpoint:   skipped {}", why);
  }
  if (lead)
    spdlog::info("checkpoint: resumed from {} (step {}, data cursor {}, written at layout {})",
                 loaded->step_dir.string(), loaded->step, loaded->metadata.data_cursor, loaded->metadata.layout);
  // Steps past the one resumed from are evidence (or the user's to restore): this run's
  // retention leaves them alone.
  const std::vector<int64_t>& kept = checkpoint.protect_steps_after(loaded->step);
  if (lead && !kept.empty()) {
    std::string list;
    for (int64_t s : kept) list += (list.empty() ? "" : ", ") + step_dir_name(s);
    spdlog::warn("checkpoint: keeping {} (newer than the step resumed from) out of this run's retention", list);
  }
  return loaded->step;
}

// The GEMM library allocates its workspace at its first call (OpenBLAS's panel buffers,
// cuBLAS's workspace). One call before the baseline keeps it out of the training state.
void warm_up_gemm(Backend& backend) {
  const int64_t n = 512;
  DeviceBuffer<float> a(backend, n * n), c(backend, n * n);
  backend.fill(a.data(), 0.0f, n * n);
  backend.gemm(Transpose::no, Transpose::no, n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n);
  backend.synchronize();
}

}  // namespace

TrainingRunResult run_training(Backend& backend, CommGrid& grid, const JobConfig& job, const TokenData& data,
                               const TrainingRunOptions& options) {
  Communicator& world = grid.world();
  const bool lead = world.rank() == 0;
  StartupTimes startup = options.startup;
  const Layout& layout = grid.layout();
  const TrainingConfig& t = job.training;
  // training.recompute "auto" becomes this layout's mode; every prediction below is at it.
  ChooserInput plan = options.plan;
  const std::string recompute_why = recompute_reason(plan, layout);
  plan.recompute = resolved_recompute(plan, layout);
  JobConfig decided = job;
  decided.training.recompute = plan.recompute;

  RunDirectoryOptions directory;
  directory.owner = options.lock_owner;
  directory.break_lock = options.break_lock;
  directory.checkpoint_bytes = checkpoint_payload_bytes(job.model);
  const std::optional<DirectoryLock> lock = open_run_directory(backend, world, job.checkpoint.dir, directory);

  // Memory of the training state = peak RSS above what the process held before it.
  warm_up_gemm(backend);
  const bool peak_reset = reset_peak_memory();
  const int64_t baseline = memory_sample().rss_bytes;

  Trainer trainer(backend, grid, decided, data);
  SaverOptions saver;
  saver.keep = job.checkpoint.keep;
  saver.save_token = options.save_token;
  TrainingCheckpoint checkpoint(job.checkpoint.dir, trainer, world.rank(), saver);
  startup.mark("model_init");

  TrainingRunResult result;
  result.start_step = resume(checkpoint, backend, world, options.fallback, lead);
  startup.mark("checkpoint_loaded");
  if (options.init_only) {
    // The initial state as step 0, for tools that compare initializations (scripts/
    // reference_check.py); an existing checkpoint is left alone.
    if (result.start_step == 0) {
      checkpoint.save(0.0);
      checkpoint.wait();
    }
    world.barrier();
    if (lead)
      spdlog::info("checkpoint: {} in {}",
                   result.start_step == 0 ? "initial state committed as step 0"
                                          : "not written: the directory already holds a run",
                   job.checkpoint.dir);
    return result;
  }

  if (result.start_step >= t.steps) {
    // A finished job run again (a template resubmitted, a requeue after the last save):
    // nothing to train, and the finished run's summary and metrics stay as they are.
    result.end_step = result.start_step;
    result.already_finished = true;
    if (lead)
      spdlog::info(
          "train: nothing to do: {} holds step {} and training.steps is {}, so this run has finished; its summary "
          "is {}/summary.json (raise training.steps to train further)",
          job.checkpoint.dir, result.start_step, t.steps, job.run.dir);
    return result;
  }

  const StepVolume volume = predict_step_volume(plan, layout);
  const CostEstimate cost = estimate_cost(plan, layout, volume);
  const MemoryEstimate memory = estimate_memory(plan, layout);
  const double global_tokens = static_cast<double>(t.global_batch) * job.model.sequence;
  std::unique_ptr<MetricsLog> metrics;
  if (lead) {
    metrics = std::make_unique<MetricsLog>(std::filesystem::path(job.run.dir) / "metrics.jsonl");
    spdlog::info("train: {} steps of {} sequences x {} tokens; per rank {} micro-batch(es) of {}; data: {}", t.steps,
                 t.global_batch, job.model.sequence, trainer.split().accumulation, trainer.split().micro_batch,
                 data.description());
    spdlog::info("train: predicted step {:.4f} s (compute {:.4f} s, communication {:.4f} s), memory {:.3f} MiB/rank",
                 cost.step_s(), cost.compute_s, cost.comm_total_s(), static_cast<double>(memory.total()) / 1048576.0);
    spdlog::info(
        "train: recompute {} ({}){}", recompute_name(*plan.recompute), recompute_why,
        cost.recompute_flops > 0
            ? fmt::format(": the backward reruns {} block(s) per micro-batch, +{:.1f}% FLOPs",
                          recomputed_blocks(job.model, *plan.recompute), 100.0 * cost.recompute_flops / cost.flops)
            : std::string());
    spdlog::info("train: communication per step per rank: {}", comm_summary(volume));
    spdlog::info("train: overlap {}",
                 t.overlap_comm ? "on: the z all-gathers and reduce-scatters and the last backward's data all-reduce run "
                                  "beside compute (training.overlap_comm = false turns it off)"
                                : "off: every collective is waited for where it is issued (training.overlap_comm)");
    spdlog::info("train: metrics in {}", metrics->path().string());
  }

  // NCCL delivers a collective's record when the host sees it finish: wait for the startup
  // collectives before clearing, and for the last step's before reading.
  grid.synchronize();
  grid.reset_counters();
  const auto start = Clock::now();
  double tokens_per_s_sum = 0, mfu_sum = 0;
  int64_t steps_run = 0;
  while (trainer.step() < t.steps) {
    const auto step_start = Clock::now();
    const double lr = trainer.learning_rate_of(trainer.step());
    const bool stop_vote = options.stop_requested && options.stop_requested();
    const StepReport report = trainer.train_step(stop_vote);
    checkpoint.poll();  // a failed background save stops the run here, at the next step
    const double step_s = seconds_since(step_start);
    ++steps_run;
    result.last_loss = report.loss;
    if (steps_run == 1) {
      startup.mark("first_step");
      if (lead) spdlog::info("startup: seconds after process start: {}", startup.describe());
    }

    StepMetrics m;
    m.step = trainer.step();
    m.loss = report.loss;
    m.lr = lr;
    m.grad_norm = report.grad_norm;
    m.step_s = step_s;
    m.tokens_per_s = global_tokens / step_s;
    m.flops_per_s = cost.flops / step_s;
    m.mfu = m.flops_per_s / plan.machine.peak_flops;
    m.predicted_step_s = cost.step_s();
    m.elapsed_s = seconds_since(start);
    m.data_cursor = trainer.data_cursor();
    tokens_per_s_sum += m.tokens_per_s;
    mfu_sum += m.mfu;
    if (lead) {
      metrics->write(m);
      const bool last = m.step == t.steps || report.stop;
      if (m.step % job.run.log_interval == 0 || m.step == result.start_step + 1 || last) {
        const double eta = m.elapsed_s / static_cast<double>(steps_run) * static_cast<double>(t.steps - m.step);
        spdlog::info(
            "step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | {:.2f} GFLOP/s/rank (MFU "
            "{:.1f}%) | step {:.3f} s (predicted {:.3f}) | ETA {}",
            m.step, t.steps, m.loss, lr, m.grad_norm, m.tokens_per_s, m.flops_per_s / 1e9, 100.0 * m.mfu, step_s,
            m.predicted_step_s, duration_text(eta));
      }
    }

    if (report.stop) {
      result.preempted = trainer.step() < t.steps;
      if (lead) spdlog::warn("train: stop requested (preemption signal); saving step {}", trainer.step());
      break;
    }
    if (job.checkpoint.interval > 0 && trainer.step() % job.checkpoint.interval == 0 && trainer.step() < t.steps) {
      const auto stall = checkpoint.save(lr);
      if (lead)
        spdlog::info("checkpoint: saving step {} in the background (training paused {:.1f} ms)", trainer.step(),
                     std::chrono::duration<double, std::milli>(stall).count());
    }
  }
  grid.synchronize();
  const CommCounters counted = grid.counters();
  result.end_step = trainer.step();

  // The final save: at the end of training or on a stop vote. Every rank waits for its shard
  // and rank 0 for the commit; the barrier keeps any rank from exiting (and a launcher from
  // stopping the others) before the step is committed.
  if (steps_run > 0) {
    checkpoint.save(trainer.learning_rate_of(trainer.step() - 1));
    checkpoint.wait();
  }
  world.barrier();
  if (lead && steps_run > 0) spdlog::info("checkpoint: step {} committed in {}", trainer.step(), job.checkpoint.dir);

  // Bytes moved against the layout model, on every rank; failures summed over ranks.
  const auto mismatches = comm_mismatches(counted, volume, steps_run);
  for (const auto& m : mismatches) spdlog::error("communication: {} (layout model mismatch)", m);
  const MemorySample mem = memory_sample();
  const double model_bytes = static_cast<double>(mem.peak_bytes - baseline);
  // The layout model predicts device memory; on the CPU backend the host copy an
  // asynchronous save keeps (this rank's share of parameters and moments) is in the RSS too.
  const double staging = backend.device_is_host() ? static_cast<double>(checkpoint.staged_bytes()) : 0.0;
  const double predicted = static_cast<double>(memory.total()) + staging;
  if (backend.device_is_host()) {
    spdlog::info(
        "memory: rank {} peak RSS {:.1f} MiB = {:.1f} MiB before training + {:.1f} MiB for training; "
        "predicted {:.1f} MiB = layout model {:.1f} + checkpoint staging {:.1f} ({:.0f}% of predicted){}",
        world.rank(), static_cast<double>(mem.peak_bytes) / 1048576.0, static_cast<double>(baseline) / 1048576.0,
        model_bytes / 1048576.0, predicted / 1048576.0, static_cast<double>(memory.total()) / 1048576.0,
        staging / 1048576.0, 100.0 * model_bytes / predicted,
        !peak_reset                    ? " (peak not resettable here: includes earlier peaks)"
        : predicted < 16.0 * 1048576.0 ? " (below ~16 MiB, libraries' fixed buffers of a few MiB dominate)"
                                       : "");
  } else {
    // The training state is in GPU memory, which the RSS does not show (it holds the host
    // staging of checkpoints and the driver's buffers instead).
    spdlog::info(
        "memory: rank {} host peak RSS {:.1f} MiB ({:.1f} MiB since before training: checkpoint staging, CUDA "
        "buffers); the layout model predicts {:.1f} MiB of GPU memory per rank (see nvidia-smi)",
        world.rank(), static_cast<double>(mem.peak_bytes) / 1048576.0, model_bytes / 1048576.0,
        static_cast<double>(memory.total()) / 1048576.0);
  }
  const std::vector<float> all =
      all_gather_floats(backend, world, {static_cast<float>(mismatches.size()), static_cast<float>(model_bytes)});
  double failures = 0;
  RunSummary summary;
  for (size_t r = 0; r < all.size(); r += 2) {
    failures += all[r];
    summary.model_memory_bytes.push_back(all[r + 1]);
    summary.predicted_memory_bytes.push_back(predicted);
  }
  result.comm_bytes_match = failures == 0;
  if (lead) {
    if (result.comm_bytes_match && steps_run > 0)
      spdlog::info(
          "communication: counted bytes equal the layout model's prediction on every rank, axis and "
          "collective ({} steps)",
          steps_run);
    summary.layout = format_layout_with_order(layout);
    summary.layout_origin = options.layout_origin;
    summary.recompute = recompute_name(*plan.recompute);
    summary.start_step = result.start_step;
    summary.end_step = result.end_step;
    summary.preempted = result.preempted;
    summary.last_loss = result.last_loss;
    summary.tokens_per_s = steps_run > 0 ? tokens_per_s_sum / static_cast<double>(steps_run) : 0;
    summary.mfu = steps_run > 0 ? mfu_sum / static_cast<double>(steps_run) : 0;
    summary.comm_bytes_match = result.comm_bytes_match;
    summary.comm_mismatches = mismatches;
    summary.predicted_per_step = volume;
    summary.comm_s_per_step = comm_seconds_per_step(counted, steps_run);
    summary.process_start_unix_s = startup.process_start_unix_s();
    summary.startup_s = startup.phases();
    write_run_summary(std::filesystem::path(job.run.dir) / "summary.json", summary);
    spdlog::info("train: {} at step {}/{}, loss {:.4f}, {:.0f} tok/s, MFU {:.1f}% (summary in {}/summary.json)",
                 result.preempted ? "stopped for preemption" : "done", result.end_step, t.steps, result.last_loss,
                 summary.tokens_per_s, 100.0 * summary.mfu, job.run.dir);
  }
  return result;
}

}  // namespace axonn
