#include "trainer/train/training_run.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/latest_recovery.hpp"
#include "checkpoint/step_dir.hpp"
#include "core/cpu_clock.hpp"
#include "core/number_text.hpp"
#include "core/wall_clock.hpp"
#include "layout/comm_overlap.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_memory.hpp"
#include "layout/layout_search.hpp"
#include "layout/layout_volume.hpp"
#include "layout/model_plan.hpp"
#include "trainer/train/host_exchange.hpp"
#include "trainer/train/memory_interval.hpp"
#include "trainer/train/memory_restore.hpp"
#include "trainer/train/memory_usage.hpp"
#include "trainer/train/metrics_log.hpp"
#include "trainer/train/run_directory.hpp"
#include "trainer/train/run_report.hpp"
#include "trainer/train/step_time_accuracy.hpp"
#include "trainer/train/straggler_watch.hpp"
#include "trainer/train/trace_ops.hpp"
#include "trainer/train/trainer.hpp"
#include "trainer/train/training_checkpoint.hpp"

namespace axonn {
namespace {

using Clock = WallClock;

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
  chosen = all_gather_integers(backend, world, chosen).front();
  if (failure) std::rethrow_exception(failure);
  if (chosen == kFailed)
    throw CheckpointError(
        dir.string(), "resume",
        "rank 0 found no committed step to resume from in " + dir.string() + " (its message says why)");
  if (chosen == kNone) return std::nullopt;
  return chosen;
}

// Resume from the checkpoint directory; returns the step resumed from (none for a fresh start).
// `layout`: this run's, as the checkpoint records it (format_layout_with_order).
std::optional<int64_t> resume(TrainingCheckpoint& checkpoint, Backend& backend, Communicator& world,
                              const std::string& layout, bool fallback, bool lead) {
  const std::optional<int64_t> recovered = recovered_step(checkpoint.dir(), backend, world, lead);
  std::optional<LoadResult> loaded = checkpoint.load(fallback, recovered);
  if (fallback) {
    // After a fallback load, ranks may have landed on different steps (each reads other
    // shards): all take the oldest.
    const std::vector<int64_t> steps = all_gather_integers(backend, world, loaded ? loaded->step : -1);
    const int64_t oldest = *std::min_element(steps.begin(), steps.end());
    if (loaded && oldest != loaded->step) loaded = checkpoint.load(false, oldest);
  }
  if (!loaded) {
    if (lead) spdlog::info("checkpoint: none in {}; starting from the initial weights", checkpoint.dir().string());
    return std::nullopt;
  }
  if (loaded->fell_back) {
    spdlog::warn("checkpoint: FELL BACK to {} (--fallback): the newer steps could not be loaded:",
                 loaded->step_dir.string());
    for (const auto& why : loaded->skipped) spdlog::warn("checkpoint:   skipped {}", why);
  }
  if (lead)
    spdlog::info("checkpoint: resumed from {} (step {}, data cursor {}, written at layout {})",
                 loaded->step_dir.string(), loaded->step, loaded->metadata.data_cursor, loaded->metadata.layout);
  // Every rank's bytes, summed: what the resume cost, and at another layout what resharding read.
  int64_t wanted = 0, read = 0;
  const std::vector<int64_t> bytes = all_gather_integers(backend, world, {loaded->bytes_wanted, loaded->bytes_read});
  for (size_t r = 0; r < bytes.size(); r += 2) {
    wanted += bytes[r];
    read += bytes[r + 1];
  }
  if (lead) {
    if (loaded->metadata.layout == layout)
      spdlog::info("checkpoint: same layout {}: read {:.2f} MiB of shards for the {:.2f} MiB the ranks hold", layout,
                   in_mib(read), in_mib(wanted));
    else
      spdlog::info("checkpoint: resharded from layout {} to {}: read {:.2f} MiB of shards for the {:.2f} MiB the "
                   "ranks hold",
                   loaded->metadata.layout, layout, in_mib(read), in_mib(wanted));
  }
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

// Memory of the training state = peak RSS above what the process held before it: taken
// after the GEMM warm-up and before the trainer allocates anything.
struct MemoryBaseline {
  bool peak_reset = false;  // false: the peak could not be reset and includes earlier peaks
  int64_t rss_bytes = 0;
};

MemoryBaseline memory_baseline(Backend& backend) {
  warm_up_gemm(backend);
  MemoryBaseline before;
  before.peak_reset = reset_peak_memory();
  before.rss_bytes = memory_sample().rss_bytes;
  return before;
}

RunDirectoryOptions run_directory_options(const JobConfig& job, const TrainingRunOptions& options) {
  RunDirectoryOptions directory;
  directory.owner = options.lock_owner;
  directory.break_lock = options.break_lock;
  directory.checkpoint_bytes = checkpoint_payload_bytes(job.model);
  directory.run_dir = job.run.dir;
  return directory;
}

SaverOptions saver_options(const JobConfig& job, const TrainingRunOptions& options, TraceRecorder& trace) {
  SaverOptions saver;
  saver.keep = job.checkpoint.keep;
  saver.save_token = options.save_token;
  saver.on_written = [&trace](int64_t step, TraceRecorder::Clock::time_point start,
                              TraceRecorder::Clock::time_point end) {
    trace.span("checkpoint", "checkpoint write", start, end, {{"step", std::to_string(step)}}, "checkpoint writer");
  };
  return saver;
}

// Seconds this rank has spent in blocking collectives (their whole time, waiting for the
// peers included) and waiting for started ones, since the counters were reset: what a step
// time less this is the rank's own work.
double comm_wait_s(const CommGrid& grid) {
  std::chrono::nanoseconds wait{0};
  for (const auto& kinds : grid.counters())
    for (const CollectiveCount& c : kinds) wait += c.time - c.started_time;
  for (const std::chrono::nanoseconds w : grid.started_wait_times()) wait += w;
  return std::chrono::duration<double>(wait).count();
}

// A test-only slowdown: AXONN_TEST_SLOW_RANK="RANK:MS" makes that rank sleep MS milliseconds
// in every step, so tests can check that the straggler watch names it. 0 for other ranks.
std::chrono::milliseconds test_slowdown(int rank) {
  const char* spec = std::getenv("AXONN_TEST_SLOW_RANK");
  int slow_rank = -1, ms = 0;
  if (spec == nullptr || std::sscanf(spec, "%d:%d", &slow_rank, &ms) != 2 || slow_rank != rank || ms < 0)
    return std::chrono::milliseconds{0};
  return std::chrono::milliseconds{ms};
}

// "rank 3 (node07)": the rank's name in a trace viewer.
std::string trace_label(int rank) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return "rank " + std::to_string(rank) + (host[0] != '\0' ? std::string(" (") + host + ")" : std::string());
}

std::filesystem::path trace_dir(const JobConfig& job) { return std::filesystem::path(job.run.dir) / "trace"; }

// <run.dir>/trace/rank-00003.json
std::filesystem::path trace_file(const JobConfig& job, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.json", rank);
  return trace_dir(job) / name;
}

// The layout model's prediction for one step of this run at its layout: what the start of
// training announces, what each step's metrics are measured against and what the
// end-of-run report checks the counted bytes and the memory against.
struct Prediction {
  StepVolume volume;
  CostEstimate cost;
  MemoryEstimate memory;
  int64_t expert_bytes_bound = 0;  // a dropless MoE model's most expert all-to-all bytes per step and rank
};

Prediction predict(const ChooserInput& plan, const Layout& layout) {
  Prediction p;
  p.volume = predict_step_volume(plan, layout);
  p.cost = estimate_cost(plan, layout, p.volume);
  p.memory = estimate_memory(plan, layout);
  p.expert_bytes_bound = expert_all_to_all_bound(plan, layout);
  return p;
}

// training.recompute and training.shard_optimizer "auto" become this layout's modes, and
// model.moe_chunks and training.tp_chunks "auto" their counts at those modes: every prediction is at them, and the
// trainer runs them. The `why`s say how they were decided, for the log.
struct DecidedPlan {
  ChooserInput plan;
  std::string recompute_why, shard_why, moe_chunks_why, overlap_why, tp_chunks_why;
  JobConfig job;
};

DecidedPlan decide_modes(const JobConfig& job, const ChooserInput& plan, const Layout& layout) {
  DecidedPlan d{plan, recompute_reason(plan, layout), shard_reason(plan, layout), "", "", "", job};
  d.overlap_why = overlap_reason(plan, layout);
  const MemoryModes modes = resolved_modes(plan, layout);
  d.moe_chunks_why = moe_chunks_reason(plan, layout, modes);
  d.plan.recompute = modes.recompute;
  d.plan.shard_optimizer = modes.shard_optimizer;
  d.plan.model.moe_chunks = resolved_moe_chunks(plan, layout, modes);
  d.plan.overlap_comm = overlaps_comm(plan, layout);
  d.tp_chunks_why = tp_chunks_reason(d.plan, layout, modes);
  d.plan.batch.tp_chunks = resolved_tp_chunks(d.plan, layout, modes);
  d.job.training.overlap_comm = d.plan.overlap_comm;
  d.job.training.tp_chunks = d.plan.batch.tp_chunks;
  d.job.training.recompute = modes.recompute;
  d.job.training.shard_optimizer = modes.shard_optimizer;
  d.job.model.moe_chunks = d.plan.model.moe_chunks;
  return d;
}

// What the step loop measured, for the end-of-run report.
struct LoopTotals {
  int64_t steps_run = 0;
  double tokens_per_s_sum = 0, mfu_sum = 0;
  CommCounters counted;                                           // bytes and calls of the collectives of the steps run
  std::array<std::chrono::nanoseconds, kCommAxisCount> waited{};  // for started collectives, per axis
  StepTimeAccuracy step_time{0};  // this rank's steps against the prediction (rank 0's: the summary)
};

// The memory a rank used for training against what the layout model predicts for it.
struct MemoryUse {
  double model_bytes = 0;  // peak RSS above the baseline
  double predicted = 0;    // the layout model's memory, plus the checkpoint staging on the CPU
};

// Rank 0's sums of the ranks' busy seconds over the steps of one log interval.
struct BusyInterval {
  std::vector<float> sums;  // [world]
  int64_t steps = 0;
};

// One rank's training run, phase by phase: the constructor sets up (the checkpoint
// directory, the memory baseline, the trainer and its checkpoint), run() resumes and then
// either stops early (init_only, a finished run) or announces the plan, trains, saves the
// final step and reports. The members are declared in the order the set-up needs them and
// are destroyed in reverse: the checkpoint (waiting for its saves) before the trainer it
// reads, the directory's lock last.
class TrainingRun {
 public:
  TrainingRun(Backend& backend, CommGrid& grid, const JobConfig& job, const TrainingData& data,
              const TrainingRunOptions& options)
      : backend_(backend),
        grid_(grid),
        world_(grid.world()),
        job_(job),
        data_(data),
        options_(options),
        lead_(world_.rank() == 0),
        startup_(options.startup),
        trace_(world_.rank(), trace_label(world_.rank())),
        straggler_(job.run.straggler_factor, options.rank_hosts),
        slowdown_(test_slowdown(world_.rank())),
        trace_ops_(trace_),
        observed_backend_(backend, trace_ops_),
        decided_(decide_modes(job, options.plan, grid.layout())),
        lock_(open_run_directory(backend, world_, job.checkpoint.dir, run_directory_options(job, options))),
        before_(memory_baseline(backend)),
        // Only a traced run puts the observer between the trainer and its backend.
        trainer_(job.run.trace_steps ? static_cast<Backend&>(observed_backend_) : backend, grid, decided_.job,
                 data.train, Trainer::InitialWeights::deferred),
        checkpoint_(job.checkpoint.dir, trainer_, world_.rank(), saver_options(job, options, trace_)),
        memory_(options.memory && options.peers != nullptr
                    ? std::make_unique<MemoryCopies>(*options.memory, trainer_, *options.peers, options.save_token)
                    : nullptr) {
    checkpoint_.allow_data_change(options.data_changed);
    trace_.name_this_thread("compute");
    grid_.trace_into(&trace_);
    trainer_.trace_into(&trace_);
    startup_.mark("model_init");
  }

  ~TrainingRun() {
    // Leaving after a failure (a finished or preempted run waited for its saves): a disk
    // commit in flight would wait for the shards of ranks that failed, holding this rank's exit
    // until the launcher's grace or srun's --wait ends it; the memory copies' link aborts alike.
    if (std::uncaught_exceptions() > 0) checkpoint_.abandon();
    grid_.trace_into(nullptr);
  }
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  TrainingRunResult run() {
    // A failed attempt's notes date the failure this run recovers from; a later one writes its own.
    if (lead_) failure_note_ = take_failure_notes(job_.run.dir);
    try {
      return resume_and_train();
    } catch (...) {
      // One note per node (its lowest rank's) keeps a thousand-rank failure from creating a
      // thousand files at once in one directory of a parallel file system.
      if (leads_its_node()) note_failure(job_.run.dir, world_.rank());
      throw;
    }
  }

 private:
  bool leads_its_node() const {
    const std::vector<std::string>& hosts = options_.rank_hosts;
    const size_t rank = static_cast<size_t>(world_.rank());
    return rank >= hosts.size() ||
           std::find(hosts.begin(), hosts.end(), hosts[rank]) - hosts.begin() == static_cast<std::ptrdiff_t>(rank);
  }

  TrainingRunResult resume_and_train() {
    TrainingRunResult result;
    const std::optional<int64_t> resumed = resume_from_memory_or_disk();
    // Drawn only when nothing was loaded: a load sets every weight, and the draw is most of a
    // large model's set-up, which a restart would wait for.
    if (!resumed) trainer_.draw_initial_weights();
    result.start_step = resumed.value_or(0);
    if (lead_ && !checkpoint_.data_change().empty()) spdlog::warn("checkpoint: {}", checkpoint_.data_change());
    startup_.mark("checkpoint_loaded");
    if (options_.init_only) {
      save_initial_state(result.start_step);
      return result;
    }
    if (result.start_step >= job_.training.steps) {
      report_already_finished(result);
      return result;
    }
    if (memory_) {
      check_memory_room(memory_->plan(), backend_, world_, memory_->staged_bytes());
      memory_schedule_.emplace(job_.checkpoint.fixed_memory_interval(), result.start_step);
    }
    const Prediction prediction = predict(decided_.plan, grid_.layout());
    announce(prediction);
    const LoopTotals totals = train_steps(prediction, result);
    result.end_step = trainer_.step();
    save_final(totals.steps_run);
    // The disk holds the last step now; a later run of the job starts from it.
    if (memory_) memory_->remove_node_copies();
    report_end(prediction, totals, result);
    return result;
  }

  // The nodes' memory copies when they hold a step newer than the disk's `latest`, else the
  // disk checkpoint (resume). Returns the step resumed from; none when nothing was loaded.
  std::optional<int64_t> resume_from_memory_or_disk() {
    if (memory_) {
      int64_t disk_step = 0;
      if (lead_) {
        try {
          disk_step = read_latest(job_.checkpoint.dir).value_or(0);
        } catch (const CheckpointError&) {
          disk_step = 0;  // resume() recovers a lost `latest`; the memory copy is newer than none
        }
      }
      disk_step = all_gather_integers(backend_, world_, disk_step).front();
      const MemoryRestore restored = restore_from_memory(memory_->plan(), *options_.peers, backend_, world_, trainer_,
                                                         disk_step, options_.data_changed);
      if (lead_ && restored.step) spdlog::info("checkpoint: {}", restored.why);
      if (lead_ && !restored.step && !restored.why.empty()) spdlog::warn("checkpoint: memory copies: {}", restored.why);
      if (restored.step) {
        memory_->restored(*restored.step);
        return *restored.step;
      }
    }
    return resume(checkpoint_, backend_, world_, format_layout_with_order(grid_.layout()), options_.fallback, lead_);
  }

  // The initial state as step 0, for tools that compare initializations (scripts/
  // reference_check.py); an existing checkpoint is left alone.
  void save_initial_state(int64_t start_step) {
    if (start_step == 0) {
      checkpoint_.save(0.0);
      checkpoint_.wait();
    }
    world_.barrier();
    if (lead_)
      spdlog::info(
          "checkpoint: {} in {}",
          start_step == 0 ? "initial state committed as step 0" : "not written: the directory already holds a run",
          job_.checkpoint.dir);
  }

  // A finished job run again (a template resubmitted, a requeue after the last save):
  // nothing to train, and the finished run's summary and metrics stay as they are.
  void report_already_finished(TrainingRunResult& result) const {
    result.end_step = result.start_step;
    result.already_finished = true;
    if (lead_)
      spdlog::info(
          "train: nothing to do: {} holds step {} and training.steps is {}, so this run has finished; its summary "
          "is {}/summary.json (raise training.steps to train further)",
          job_.checkpoint.dir, result.start_step, job_.training.steps, job_.run.dir);
  }

  // Rank 0 opens <run.dir>/metrics.jsonl and logs what the run will do and what the layout
  // model predicts for it.
  void announce(const Prediction& prediction) {
    if (!lead_) return;
    const TrainingConfig& t = job_.training;
    const std::filesystem::path metrics_path = std::filesystem::path(job_.run.dir) / "metrics.jsonl";
    if (options_.recovery) last_logged_before_ = last_logged_step(metrics_path);
    metrics_ = std::make_unique<MetricsLog>(metrics_path);
    spdlog::info("train: {} steps of {} sequences x {} tokens; per rank {} micro-batch(es) of {}; data: {}", t.steps,
                 t.global_batch, job_.model.sequence, trainer_.split().accumulation, trainer_.split().micro_batch,
                 data_.train.description());
    if (data_.held_out && job_.run.eval_interval > 0)
      spdlog::info("train: every {} steps, the loss of {} held-out samples of {}", job_.run.eval_interval,
                   int64_t{job_.run.eval_batches} * t.global_batch, data_.held_out->description());
    spdlog::info(
        "train: predicted step {:.4f} s (compute {:.4f} s, communication {:.4f} s, of it hidden behind compute "
        "{:.4f} s and filled by other ranks' compute on shared cores {:.4f} s, keeping those cores busy {:.4f} s), "
        "memory {:.3f} MiB/rank",
        prediction.cost.step_s(), prediction.cost.compute_s, prediction.cost.comm_total_s(), prediction.cost.hidden_s,
        prediction.cost.filled_s, prediction.cost.busy_s, static_cast<double>(prediction.memory.total()) / 1048576.0);
    if (memory_)
      spdlog::info(
          "train: memory copies {}: {:.3f} MiB/rank of host memory predicted (staging, and two steps of this "
          "rank's shard and its buddy's in the node's tmpfs)",
          describe_memory_interval(job_.checkpoint.fixed_memory_interval()), in_mib(prediction.memory.memory_copies));
    const Recompute mode = *decided_.plan.recompute;
    spdlog::info("train: recompute {} ({}){}", recompute_name(mode), decided_.recompute_why,
                 prediction.cost.recompute_flops > 0
                     ? fmt::format(": the backward reruns {} block(s) per micro-batch, +{:.1f}% FLOPs",
                                   recomputed_blocks(job_.model, mode),
                                   100.0 * prediction.cost.recompute_flops / prediction.cost.flops)
                     : std::string());
    spdlog::info("train: optimizer state {} ({})",
                 *decided_.plan.shard_optimizer
                     ? fmt::format("sharded over the {} data ranks: AdamW moments of 1/{} of each gradient bucket "
                                   "per rank; the data all-reduce is a reduce-scatter, then an all-gather of the "
                                   "updated weights",
                                   grid_.layout().data, grid_.layout().data)
                     : std::string("unsharded"),
                 decided_.shard_why);
    if (!decided_.moe_chunks_why.empty()) spdlog::info("train: {}", decided_.moe_chunks_why);
    if (!decided_.tp_chunks_why.empty()) spdlog::info("train: {}", decided_.tp_chunks_why);
    spdlog::info("train: communication per step per rank: {}", comm_summary(prediction.volume));
    spdlog::info("train: overlap {} ({})",
                 *decided_.plan.overlap_comm
                     ? "on: the z all-gathers and reduce-scatters and the last backward's data all-reduce run "
                       "beside compute"
                     : "off: every collective is waited for where it is issued",
                 decided_.overlap_why);
    spdlog::info("train: metrics in {}", metrics_->path().string());
  }

  // Trains to training.steps, or until the ranks agree to stop (a preemption signal): each
  // step is measured, rank 0 logs and records it, and every checkpoint.interval steps a
  // save starts in the background. Returns what the loop measured.
  LoopTotals train_steps(const Prediction& prediction, TrainingRunResult& result) {
    const TrainingConfig& t = job_.training;
    const double global_tokens = static_cast<double>(t.global_batch) * job_.model.sequence;
    LoopTotals totals;
    totals.step_time = StepTimeAccuracy(prediction.cost.step_s());
    // NCCL delivers a collective's record when the host sees it finish: wait for the startup
    // collectives before clearing, and for the last step's before reading.
    grid_.synchronize();
    grid_.reset_counters();
    const auto start = Clock::now();
    double cpu_at_last_line = process_cpu_seconds();  // metrics.jsonl's cpu_s tiles the run from here
    double busy_s = 0;  // this rank's previous step's, shared in the next step's all-reduce
    BusyInterval interval;
    bool disk_save_beside = false;  // a disk save's writer runs beside this step
    while (trainer_.step() < t.steps) {
      const auto step_start = Clock::now();
      const int64_t step_number = trainer_.step() + 1;  // as metrics.jsonl numbers it
      trace_.set_active(job_.run.trace_steps && job_.run.trace_steps->contains(step_number));
      const double lr = trainer_.learning_rate_of(trainer_.step());
      const bool stop_vote = options_.stop_requested && options_.stop_requested();
      const double wait_before = comm_wait_s(grid_);
      if (slowdown_.count() > 0) std::this_thread::sleep_for(slowdown_);
      if (trace_.active()) trace_ops_.begin_step(backend_);
      const StepReport report = train_step_or_dump(stop_vote, static_cast<float>(busy_s));
      if (trace_.active()) trace_ops_.end_step(backend_);
      checkpoint_.poll();  // a failed background save stops the run here, at the next step
      if (memory_) memory_->poll();
      const double step_s = seconds_since(step_start);
      const bool step_beside_disk_save = disk_save_beside;
      disk_save_beside = false;
      busy_s = std::max(0.0, step_s - (comm_wait_s(grid_) - wait_before));
      if (lead_) watch_stragglers(report, step_number, interval);
      trace_.span("step", "step " + std::to_string(step_number), step_start, Clock::now(),
                  {{"step", std::to_string(step_number)}}, "steps");
      if (trace_.active() && step_number == job_.run.trace_steps->last) write_trace();
      trace_.set_active(false);
      ++totals.steps_run;
      result.last_loss = report.loss;
      if (totals.steps_run == 1) {
        startup_.mark("first_step");
        if (lead_) spdlog::info("startup: seconds after process start: {}", startup_.describe());
        if (lead_ && options_.recovery) {
          recovery_ = recovery_report(with_failure_note(*options_.recovery, failure_note_), startup_, result.start_step,
                                      last_logged_before_);
          spdlog::info("recovery: {}", describe_recovery(*recovery_));
        }
      }

      StepMetrics m;
      m.step = trainer_.step();
      m.loss = report.loss;
      m.lr = lr;
      m.grad_norm = report.grad_norm;
      m.step_s = step_s;
      m.tokens_per_s = global_tokens / step_s;
      m.flops_per_s = prediction.cost.flops / step_s;
      m.mfu = m.flops_per_s / decided_.plan.machine.peak_flops;
      m.predicted_step_s = prediction.cost.step_s();
      m.elapsed_s = seconds_since(start);
      const double cpu_now = process_cpu_seconds();
      m.cpu_s = cpu_now - cpu_at_last_line;
      cpu_at_last_line = cpu_now;
      m.data_cursor = trainer_.data_cursor();
      m.moe = job_.model.moe();
      m.balance_loss = report.balance_loss;
      m.dropped_fraction = report.dropped_fraction;
      m.expert_load = report.expert_load;
      if (evaluates(m.step)) m.eval_loss = evaluate();
      totals.tokens_per_s_sum += m.tokens_per_s;
      totals.mfu_sum += m.mfu;
      totals.step_time.add(step_s);
      if (lead_) {
        record_step(m, m.step == t.steps || report.stop, totals.steps_run, result.start_step);
        if (const std::optional<std::string> warning = totals.step_time.warning_due()) spdlog::warn("{}", *warning);
      }

      if (report.stop) {
        result.preempted = trainer_.step() < t.steps;
        if (lead_) spdlog::warn("train: stop requested (preemption signal); saving step {}", trainer_.step());
        break;
      }
      if (job_.checkpoint.interval > 0 && trainer_.step() % job_.checkpoint.interval == 0 &&
          trainer_.step() < t.steps) {
        const auto stall = traced_save(lr);
        disk_save_beside = true;  // its writing runs beside the next step
        if (lead_)
          spdlog::info("checkpoint: saving step {} in the background (training paused {:.1f} ms)", trainer_.step(),
                       std::chrono::duration<double, std::milli>(stall).count());
      }
      if (memory_ && trainer_.step() < t.steps) {
        if (memory_schedule_->calibrating()) {
          const CalibrationStep measured = memory_schedule_->boundary(trainer_.step(), any_memory_copy_running());
          calibration_.add(measured, step_s, step_beside_disk_save);
        }
        if (memory_schedule_->deciding(trainer_.step())) choose_memory_interval();
        if (memory_schedule_->due(trainer_.step())) copy_to_memory(lr);
      }
    }
    grid_.synchronize();
    totals.counted = grid_.counters();
    totals.waited = grid_.started_wait_times();
    // A run that stopped inside the traced steps (preempted, or fewer steps) writes what it has.
    if (job_.run.trace_steps && !trace_written_ && trace_.traced_events() > 0) write_trace();
    return totals;
  }

  // The held-out loss (Trainer::evaluate); its collectives stay out of the step's counters,
  // which the summary compares with the layout model's bytes per step.
  double evaluate() {
    grid_.synchronize();
    const CommGrid::CounterState steps = grid_.counter_state();
    const double loss = trainer_.evaluate(*data_.held_out, job_.run.eval_batches);
    grid_.synchronize();
    grid_.restore_counters(steps);
    return loss;
  }

  // Whether step `step` (1-based, done) ends with a held-out evaluation: every
  // run.eval_interval steps, on every rank alike.
  bool evaluates(int64_t step) const {
    return data_.held_out && job_.run.eval_interval > 0 && step % job_.run.eval_interval == 0;
  }

  // Rank 0: the ranks' busy seconds of the previous step (StepReport::rank_busy_s) added up
  // over each run.log_interval steps; at the interval's end, their means go to the straggler
  // watch, whose warning is logged.
  void watch_stragglers(const StepReport& report, int64_t step_number, BusyInterval& interval) {
    const bool reported =
        std::any_of(report.rank_busy_s.begin(), report.rank_busy_s.end(), [](float s) { return s > 0; });
    if (reported) {
      interval.sums.resize(report.rank_busy_s.size(), 0.0f);
      for (size_t r = 0; r < interval.sums.size(); ++r) interval.sums[r] += report.rank_busy_s[r];
      ++interval.steps;
    }
    if (step_number % job_.run.log_interval != 0 || interval.steps == 0) return;
    for (float& s : interval.sums) s /= static_cast<float>(interval.steps);
    if (const std::optional<std::string> warning = straggler_.observe(step_number, interval.sums))
      spdlog::warn("{}", *warning);
    interval = {};
  }

  // A memory copy of the state (memory_copies.hpp): the pause is traced like a save's and
  // logged at the first copy, then summed for the end of the run.
  void copy_to_memory(double lr) {
    const TraceSpan span(&trace_, "checkpoint", "memory copy", {{"step", std::to_string(trainer_.step())}});
    const double paused_ms = std::chrono::duration<double, std::milli>(memory_->save(lr)).count();
    memory_paused_ms_ += paused_ms;
    ++memory_copies_;
    if (lead_ && memory_copies_ == 1) {
      const MemoryCopyPlan& plan = memory_->plan();
      spdlog::info("checkpoint: memory copies {} in {}{}; the first, of step {}, paused training {:.1f} ms",
                   describe_memory_interval(job_.checkpoint.fixed_memory_interval()), plan.node_dir.string(),
                   plan.buddy >= 0 ? fmt::format(" and on rank {}'s node", plan.buddy)
                                   : std::string(" (one node: no copy on another)"),
                   trainer_.step(), paused_ms);
    }
  }

  // A collective of the run's own bookkeeping, not of the model's step: left out of the step's
  // counted bytes, which the summary compares with the layout model's.
  template <class Exchange>
  auto uncounted(Exchange exchange) {
    const CommGrid::CounterState before = grid_.counter_state();
    auto result = exchange();
    grid_.restore_counters(before);
    return result;
  }

  // checkpoint.memory_interval = "auto", calibrating: whether any rank's memory copy is still
  // writing or sending, agreed by every rank (a small all-gather per step, for the few steps
  // the calibration takes), so that all of them copy after the same steps.
  bool any_memory_copy_running() {
    const std::vector<int64_t> running =
        uncounted([&] { return all_gather_integers(backend_, world_, {memory_->running() ? 1 : 0}); });
    return std::find(running.begin(), running.end(), 1) != running.end();
  }

  // checkpoint.memory_interval = "auto", at the end of the calibration (every rank's last
  // calibration copy has ended): every rank measures what its calibration copies cost, and the
  // ranks copy every K steps from then on, K the most any rank needs to keep its copies within
  // the budget.
  void choose_memory_interval() {
    memory_->wait();
    CopyCost cost;
    cost.step_s = calibration_.step_s();
    cost.pause_s = memory_paused_ms_ / 1e3 / static_cast<double>(memory_copies_);
    const int copies = static_cast<int>(memory_schedule_->calibration_copies().size());
    cost.slowdown_s = calibration_.slowdown_s(copies);
    cost.slowdown_bound_s = calibration_.slowdown_bound_s(copies);
    cost.background_s = std::chrono::duration<double>(memory_->longest_background()).count();
    // [interval, step, pause, slowdown, its bound, background] of every rank, the times in microseconds.
    constexpr size_t kFields = 6;
    auto us = [](double s) { return static_cast<int64_t>(std::llround(s * 1e6)); };
    const std::vector<int64_t> all = uncounted([&] {
      return all_gather_integers(backend_, world_,
                                 {memory_interval_for(cost), us(cost.step_s), us(cost.pause_s), us(cost.slowdown_s),
                                  us(cost.slowdown_bound_s), us(cost.background_s)});
    });
    size_t most = 0;
    for (size_t r = 0; r < all.size(); r += kFields)
      if (all[r] > all[most]) most = r;
    const int interval = static_cast<int>(all[most]);
    memory_schedule_->decide(interval);
    if (!lead_) return;
    auto seconds = [&](size_t field) { return static_cast<double>(all[most + field]) / 1e6; };
    const CopyCost theirs{.step_s = seconds(1),
                          .pause_s = seconds(2),
                          .slowdown_s = seconds(3),
                          .slowdown_bound_s = seconds(4),
                          .background_s = seconds(5)};
    spdlog::info(
        "checkpoint: memory copies every {} steps from step {} (checkpoint.memory_interval = \"auto\", measured on "
        "the copies after {}): on rank {}, {}; every {} steps keeps them within {:.0f}% of training time{}",
        interval, memory_schedule_->next_copy(trainer_.step()),
        describe_copy_steps(memory_schedule_->calibration_copies()), most / kFields, describe_copy_cost(theirs),
        interval, 100 * kMemoryCopyBudget,
        theirs.background_s > theirs.step_s ? " and lets each copy end before the next" : "");
  }

  // The checkpoint's copy into host buffers, which pauses training, as a span of the step.
  std::chrono::nanoseconds traced_save(double lr) {
    const TraceSpan span(&trace_, "checkpoint", "checkpoint copy", {{"step", std::to_string(trainer_.step())}});
    return checkpoint_.save(lr);
  }

  // One step; when a collective fails (a peer hung or died), this rank's last events are
  // written to <run.dir>/trace/hang-rank-N.json first, with the error, so the ranks' files
  // show where each one was.
  StepReport train_step_or_dump(bool stop_vote, float busy_s) {
    try {
      return trainer_.train_step(stop_vote, busy_s);
    } catch (const CommError& e) {
      char name[32];
      std::snprintf(name, sizeof name, "hang-rank-%d.json", world_.rank());
      const std::filesystem::path path = trace_dir(job_) / name;
      std::string why;
      if (trace_.write_recent(path, e.what(), &why))
        spdlog::error("trace: rank {}'s last {} events before the failed collective are in {}", world_.rank(),
                      TraceRecorder::kRecentEvents, path.string());
      else
        spdlog::error("trace: {}", why);
      throw;
    }
  }

  // Every rank writes its traced steps' events to <run.dir>/trace/rank-NNNNN.json; a failure
  // to write is logged, not fatal (the run goes on).
  void write_trace() {
    trace_written_ = true;
    const std::filesystem::path path = trace_file(job_, world_.rank());
    std::string why;
    if (!trace_.write(path, &why)) {
      spdlog::warn("trace: {} (set run.dir to a writable directory)", why);
      return;
    }
    if (lead_)
      spdlog::info(
          "trace: steps {}-{} of every rank in {} ({} events on rank 0); merge them with "
          "scripts/merge_traces.py {}",
          job_.run.trace_steps->first, job_.run.trace_steps->last, trace_dir(job_).string(), trace_.traced_events(),
          job_.run.dir);
  }

  // Rank 0: appends a step to metrics.jsonl, and logs it every run.log_interval steps, at
  // the first step of this run and at the last.
  void record_step(const StepMetrics& m, bool last, int64_t steps_run, int64_t start_step) {
    const TrainingConfig& t = job_.training;
    metrics_->write(m);
    if (m.step % job_.run.log_interval == 0 || m.step == start_step + 1 || last) {
      const double eta = m.elapsed_s / static_cast<double>(steps_run) * static_cast<double>(t.steps - m.step);
      spdlog::info(
          "step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | {:.2f} GFLOP/s/rank (MFU "
          "{:.1f}%) | step {:.3f} s (predicted {:.3f}) | ETA {}",
          m.step, t.steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.flops_per_s / 1e9, 100.0 * m.mfu, m.step_s,
          m.predicted_step_s, duration_text(eta));
      if (m.moe)
        spdlog::info(
            "step {}/{} | moe: balance loss {:.4f} | dropped {:.1f}% of routed tokens | expert load {:.2f} "
            "(max/mean tokens per expert)",
            m.step, t.steps, m.balance_loss, 100.0 * m.dropped_fraction, m.expert_load);
    }
    if (m.eval_loss)
      spdlog::info("step {}/{} | held-out loss {:.4f} ({} samples)", m.step, t.steps, *m.eval_loss,
                   int64_t{job_.run.eval_batches} * t.global_batch);
  }

  // The final save: at the end of training or on a stop vote. Every rank waits for its shard
  // and rank 0 for the commit, and for its memory copy in flight; the barrier keeps any rank
  // from exiting (and a launcher from stopping the others) before the step is committed.
  void save_final(int64_t steps_run) {
    if (steps_run > 0) {
      checkpoint_.save(trainer_.learning_rate_of(trainer_.step() - 1));
      checkpoint_.wait();
    }
    // Every memory copy done before the barrier: after it a node's lowest rank may remove them.
    if (memory_) memory_->wait();
    world_.barrier();
    if (lead_ && steps_run > 0)
      spdlog::info("checkpoint: step {} committed in {}", trainer_.step(), job_.checkpoint.dir);
    if (lead_ && memory_copies_ > 0)
      spdlog::info("checkpoint: {} memory copies paused training {:.2f} ms each on average", memory_copies_,
                   memory_paused_ms_ / static_cast<double>(memory_copies_));
  }

  // Every rank logs its peak memory beside the layout model's prediction.
  MemoryUse report_memory(const MemoryEstimate& memory) {
    const MemorySample mem = memory_sample();
    MemoryUse use;
    use.model_bytes = static_cast<double>(mem.peak_bytes - before_.rss_bytes);
    // The layout model predicts device memory; on the CPU backend the host copy an
    // asynchronous save keeps (this rank's share of parameters and moments) is in the RSS too.
    // A memory copy's host buffers are a second such copy.
    const double staging =
        backend_.device_is_host()
            ? static_cast<double>(checkpoint_.staged_bytes() + (memory_copies_ > 0 ? memory_->staged_bytes() : 0))
            : 0.0;
    use.predicted = static_cast<double>(memory.total()) + staging;
    if (backend_.device_is_host()) {
      spdlog::info(
          "memory: rank {} peak RSS {:.1f} MiB = {:.1f} MiB before training + {:.1f} MiB for training; "
          "predicted {:.1f} MiB = layout model {:.1f} + checkpoint staging {:.1f} ({:.0f}% of predicted){}",
          world_.rank(), static_cast<double>(mem.peak_bytes) / 1048576.0,
          static_cast<double>(before_.rss_bytes) / 1048576.0, use.model_bytes / 1048576.0, use.predicted / 1048576.0,
          static_cast<double>(memory.total()) / 1048576.0, staging / 1048576.0, 100.0 * use.model_bytes / use.predicted,
          !before_.peak_reset                ? " (peak not resettable here: includes earlier peaks)"
          : use.predicted < 16.0 * 1048576.0 ? " (below ~16 MiB, libraries' fixed buffers of a few MiB dominate)"
                                             : "");
    } else {
      // The training state is in GPU memory, which the RSS does not show (it holds the host
      // staging of checkpoints and the driver's buffers instead).
      spdlog::info(
          "memory: rank {} host peak RSS {:.1f} MiB ({:.1f} MiB since before training: checkpoint staging, CUDA "
          "buffers); the layout model predicts {:.1f} MiB of GPU memory per rank (see nvidia-smi)",
          world_.rank(), static_cast<double>(mem.peak_bytes) / 1048576.0, use.model_bytes / 1048576.0,
          static_cast<double>(memory.total()) / 1048576.0);
    }
    return use;
  }

  // The end-of-run report: every rank checks its counted bytes against the layout model and
  // logs its memory; the failures are summed over ranks, and rank 0 writes
  // <run.dir>/summary.json and the closing line.
  void report_end(const Prediction& prediction, const LoopTotals& totals, TrainingRunResult& result) {
    const int64_t steps_run = totals.steps_run;
    // Bytes moved against the layout model, on every rank; failures summed over ranks.
    auto mismatches = comm_mismatches(totals.counted, prediction.volume, steps_run);
    for (const auto& m : mismatches) spdlog::error("communication: {} (layout model mismatch)", m);
    // The bytes that vary with the routing, summed over the world (every rank gets the sums);
    // the busiest rank's expert all-to-all against the bound of every row reaching one rank.
    for (const auto& [axis, kind] : routing_entries(prediction.volume)) {
      const auto& counted = totals.counted[static_cast<size_t>(axis)][static_cast<size_t>(kind)];
      int64_t world_bytes = 0, most = 0;
      for (const int64_t b : all_gather_integers(backend_, world_, counted.bytes)) {
        world_bytes += b;
        most = std::max(most, b);
      }
      if (lead_ && axis == CommAxis::expert && steps_run > 0)
        spdlog::info(
            "communication: the dropless expert all-to-all moved {:.3f} MiB per step on the busiest rank, {:.3f} "
            "MiB on the average (the layout model's prediction), at most {:.3f} MiB if one rank's experts "
            "received every routed row",
            static_cast<double>(most) / static_cast<double>(steps_run) / 1048576.0,
            static_cast<double>(prediction.volume.at(axis, kind).bytes) / 1048576.0,
            static_cast<double>(prediction.expert_bytes_bound) / 1048576.0);
      const std::string m = routing_mismatch(axis, kind, world_bytes, prediction.volume, steps_run, world_.size());
      if (m.empty()) continue;
      if (lead_) spdlog::error("communication: {} (layout model mismatch)", m);
      mismatches.push_back(m);
    }
    const MemoryUse use = report_memory(prediction.memory);
    // Each rank's prediction: the checkpoint staging in it differs between ranks that write
    // different shares of the replicated tensors.
    const std::vector<float> all =
        all_gather_floats(backend_, world_,
                          {static_cast<float>(mismatches.size()), static_cast<float>(use.model_bytes),
                           static_cast<float>(use.predicted)});
    double failures = 0;
    RunSummary summary;
    for (size_t r = 0; r + 2 < all.size(); r += 3) {
      failures += all[r];
      summary.model_memory_bytes.push_back(all[r + 1]);
      summary.predicted_memory_bytes.push_back(all[r + 2]);
    }
    result.comm_bytes_match = failures == 0;
    if (!lead_) return;
    if (result.comm_bytes_match && steps_run > 0)
      spdlog::info(
          "communication: counted bytes equal the layout model's prediction on every rank, axis and "
          "collective ({} steps){}",
          steps_run,
          routing_entries(prediction.volume).empty()
              ? ""
              : "; those that vary with the routing (dropless experts' rows) in their sum over the ranks");
    summary.layout = format_layout_with_order(grid_.layout());
    summary.layout_origin = options_.layout_origin;
    summary.recompute = recompute_name(*decided_.plan.recompute);
    summary.shard_optimizer = *decided_.plan.shard_optimizer;
    if (job_.model.moe()) summary.moe_rounds = moe_shape(decided_.plan.model, trainer_.split(), grid_.layout()).rounds;
    summary.start_step = result.start_step;
    summary.end_step = result.end_step;
    summary.preempted = result.preempted;
    summary.last_loss = result.last_loss;
    summary.tokens_per_s = steps_run > 0 ? totals.tokens_per_s_sum / static_cast<double>(steps_run) : 0;
    summary.mfu = steps_run > 0 ? totals.mfu_sum / static_cast<double>(steps_run) : 0;
    summary.step_s_median = totals.step_time.median_step_s();
    summary.predicted_step_s = totals.step_time.predicted_step_s();
    summary.step_time_ratio = totals.step_time.ratio();
    summary.comm_bytes_match = result.comm_bytes_match;
    summary.comm_mismatches = mismatches;
    summary.predicted_per_step = prediction.volume;
    summary.comm_s_per_step = comm_seconds_per_step(totals.counted, steps_run);
    summary.steps_run = steps_run;
    summary.counted_per_tier =
        bytes_per_tier(decided_.plan.machine, grid_.layout(), counted_bytes_per_axis(totals.counted));
    summary.predicted_per_tier =
        bytes_per_tier(decided_.plan.machine, grid_.layout(), bytes_per_axis(prediction.volume));
    spdlog::info("communication per link tier (rank 0, per step): {}",
                 tier_summary(summary.counted_per_tier, summary.predicted_per_tier, steps_run));
    summary.comm_profile = comm_profile(totals.counted, totals.waited, prediction.volume, prediction.cost,
                                        decided_.plan.machine, grid_.layout(), steps_run);
    if (!summary.comm_profile.empty())
      spdlog::info("communication profile (rank 0, {} steps; time on the thread or stream that ran each call):",
                   steps_run);
    for (const std::string& line : comm_profile_lines(summary.comm_profile)) spdlog::info("communication:   {}", line);
    summary.process_start_unix_s = startup_.process_start_unix_s();
    summary.startup_s = startup_.phases();
    summary.recovery = recovery_;
    write_run_summary(std::filesystem::path(job_.run.dir) / "summary.json", summary);
    spdlog::info("train: {} at step {}/{}, loss {:.4f}, {:.0f} tok/s, MFU {:.1f}% (summary in {}/summary.json)",
                 result.preempted ? "stopped for preemption" : "done", result.end_step, job_.training.steps,
                 result.last_loss, summary.tokens_per_s, 100.0 * summary.mfu, job_.run.dir);
  }

  Backend& backend_;
  CommGrid& grid_;
  Communicator& world_;
  const JobConfig& job_;
  const TrainingData& data_;
  const TrainingRunOptions& options_;
  const bool lead_;  // rank 0 narrates, writes metrics.jsonl and summary.json
  StartupTimes startup_;
  // The rank's timeline: the collectives and the step's phases always (the last few, for a
  // hang's file), the backend's ops too in the steps of run.trace_steps.
  TraceRecorder trace_;
  StragglerWatch straggler_;                  // rank 0's
  const std::chrono::milliseconds slowdown_;  // test-only (test_slowdown)
  TraceOps trace_ops_;
  ObservedBackend observed_backend_;
  const DecidedPlan decided_;
  const std::optional<DirectoryLock> lock_;  // held until the run returns
  const MemoryBaseline before_;
  Trainer trainer_;
  TrainingCheckpoint checkpoint_;
  std::unique_ptr<MemoryCopies> memory_;               // with memory copies (checkpoint.memory_interval)
  std::optional<MemoryCopySchedule> memory_schedule_;  // with memory_, once the run resumed
  double memory_paused_ms_ = 0;                        // summed over this run's memory copies
  int64_t memory_copies_ = 0;
  CopyCalibration calibration_;          // "auto"
  std::unique_ptr<MetricsLog> metrics_;  // rank 0's, once training starts
  std::optional<int64_t> last_logged_before_;  // a restarted run's: the failed attempt's last metrics line
  std::optional<RecoveryReport> recovery_;     // rank 0's, after a restarted run's first step
  std::optional<FailureNote> failure_note_;    // rank 0's: when the failed attempt first noticed its failure
  bool trace_written_ = false;
};

}  // namespace

TrainingRunResult run_training(Backend& backend, CommGrid& grid, const JobConfig& job, const TrainingData& data,
                               const TrainingRunOptions& options) {
  return TrainingRun(backend, grid, job, data, options).run();
}

}  // namespace axonn
