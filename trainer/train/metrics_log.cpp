#include "trainer/train/metrics_log.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace axonn {

MetricsLog::MetricsLog(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr)
    throw std::runtime_error("cannot open the metrics file " + path.string() + ": " + std::strerror(errno) +
                             " (set run.dir to a writable directory)");
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLog::write(const StepMetrics& m) {
  // %.9g keeps float32 values exact enough to compare runs; every field is a number.
  std::fprintf(file_,
               "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.6g, "
               "\"flops_per_s\": %.6g, \"mfu\": %.6g, \"step_s\": %.6g, \"predicted_step_s\": %.6g, "
               "\"elapsed_s\": %.6g, \"data_cursor\": %lld",
               static_cast<long long>(m.step), m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.flops_per_s, m.mfu,
               m.step_s, m.predicted_step_s, m.elapsed_s, static_cast<long long>(m.data_cursor));
  if (m.moe)
    std::fprintf(file_, ", \"balance_loss\": %.9g, \"dropped_fraction\": %.6g, \"expert_load\": %.6g",
                 m.balance_loss, m.dropped_fraction, m.expert_load);
  std::fputs("}\n", file_);
  std::fflush(file_);
}

}  // namespace axonn
