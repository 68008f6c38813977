#pragma once
// The per-step metrics file: one JSON object per line (JSONL) in the run directory, appended
// to, so a resumed run continues the same file. scripts/plot_metrics.py draws it.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

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
  int64_t data_cursor = 0;  // next global sample after the step
  // An MoE model's routing (StepReport's), written only when `moe`.
  bool moe = false;
  double balance_loss = 0;
  double dropped_fraction = 0;
  double expert_load = 0;
};

class MetricsLog {
 public:
  // Creates the directory if needed; opens path for appending. Throws std::runtime_error
  // naming the path when it cannot.
  explicit MetricsLog(const std::filesystem::path& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const StepMetrics& m);  // one line, flushed
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace axonn
