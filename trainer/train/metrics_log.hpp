#pragma once
// The per-step metrics file: one JSON object per line (JSONL) in the run directory, appended
// to, so a resumed run continues the same file. scripts/plot_metrics.py draws it. The same
// scalars also go to a TensorBoard events file beside it (tensorboard_events.hpp, tags in
// docs/tensorboard.md), a new one per process.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "trainer/train/tensorboard_events.hpp"

namespace axonn {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the optimizer step just finished
  double loss = 0;   // mean per token over the global batch
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;  // global batch tokens / step time
  double flops_per_s = 0;   // per rank, model FLOPs (layout_cost.hpp's count) / step time
  double mfu = 0;           // flops_per_s / the site's peak per GPU
  double step_s = 0;        // measured on rank 0
  double predicted_step_s = 0;
  double elapsed_s = 0;     // since this process started training
  // This process's CPU seconds, every thread, since the previous step's line (the first: since
  // training started): the step and what ran beside it (a checkpoint's writer, the memory
  // copies). Against step_s it shows a rank waiting (below) or using more than one core (above).
  double cpu_s = 0;
  int64_t data_cursor = 0;  // next global sample after the step
  // An MoE model's routing (StepReport's), written only when `moe`.
  bool moe = false;
  double balance_loss = 0;
  double dropped_fraction = 0;
  double expert_load = 0;
  // The held-out loss (mean per token) of a step that ends with an evaluation (run.eval_interval).
  std::optional<double> eval_loss;
};

class MetricsLog {
 public:
  // Creates the directory if needed; opens path for appending and creates a new events file
  // in path's directory. Throws std::runtime_error naming the file when it cannot.
  explicit MetricsLog(const std::filesystem::path& path);
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // One line and one event, each flushed. Throws std::runtime_error naming the events file
  // when writing it fails.
  void write(const StepMetrics& m);
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& events_path() const { return events_.path(); }

 private:
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  std::filesystem::path path_;
  std::unique_ptr<std::FILE, CloseFile> file_;  // metrics.jsonl: opened first, so its failure leaves no events file
  TensorBoardEvents events_;
};

// The step of the last line of the metrics file at `path` that names one ("step": N); nullopt
// when the file is absent or names none. A restarted run counts the steps it does again with it.
std::optional<int64_t> last_logged_step(const std::filesystem::path& path);

}  // namespace axonn
