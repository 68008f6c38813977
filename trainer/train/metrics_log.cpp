#include "trainer/train/metrics_log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "core/wall_clock.hpp"

namespace axonn {
namespace {

std::FILE* open_for_append(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr)
    throw std::runtime_error("cannot open the metrics file " + path.string() + ": " + std::strerror(errno) +
                             " (set run.dir to a writable directory)");
  return file;
}

// The TensorBoard scalars of a step: every number metrics.jsonl has but elapsed_s (TensorBoard's
// relative time axis shows it) and data_cursor (a sample index, past float32's exact integers
// at 2^24). "train/" how the model learns, "perf/" how fast, "moe/" the routing of an MoE model.
std::vector<TensorBoardScalar> tensorboard_scalars(const StepMetrics& m) {
  std::vector<TensorBoardScalar> scalars = {
      {"train/loss", m.loss},
      {"train/lr", m.lr},
      {"train/grad_norm", m.grad_norm},
      {"perf/tokens_per_s", m.tokens_per_s},
      {"perf/flops_per_s", m.flops_per_s},
      {"perf/mfu", m.mfu},
      {"perf/step_s", m.step_s},
      {"perf/predicted_step_s", m.predicted_step_s},
      {"perf/cpu_s", m.cpu_s},
  };
  if (m.moe) {
    scalars.push_back({"moe/balance_loss", m.balance_loss});
    scalars.push_back({"moe/dropped_fraction", m.dropped_fraction});
    scalars.push_back({"moe/expert_load", m.expert_load});
  }
  if (m.eval_loss) scalars.push_back({"eval/loss", *m.eval_loss});
  return scalars;
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& path)
    : path_(path), file_(open_for_append(path)), events_(path.parent_path()) {}

void MetricsLog::write(const StepMetrics& m) {
  // %.9g keeps float32 values exact enough to compare runs; every field is a number.
  std::fprintf(file_.get(),
               "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.6g, "
               "\"flops_per_s\": %.6g, \"mfu\": %.6g, \"step_s\": %.6g, \"predicted_step_s\": %.6g, "
               "\"elapsed_s\": %.6g, \"data_cursor\": %lld, \"cpu_s\": %.6g",
               static_cast<long long>(m.step), m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.flops_per_s, m.mfu,
               m.step_s, m.predicted_step_s, m.elapsed_s, static_cast<long long>(m.data_cursor), m.cpu_s);
  if (m.moe)
    std::fprintf(file_.get(), ", \"balance_loss\": %.9g, \"dropped_fraction\": %.6g, \"expert_load\": %.6g",
                 m.balance_loss, m.dropped_fraction, m.expert_load);
  if (m.eval_loss) std::fprintf(file_.get(), ", \"eval_loss\": %.9g", *m.eval_loss);
  std::fputs("}\n", file_.get());
  std::fflush(file_.get());
  events_.write_scalars(m.step, unix_seconds_now(), tensorboard_scalars(m));
}

std::optional<int64_t> last_logged_step(const std::filesystem::path& path) {
  // Only the tail: a month-long run's file has millions of lines, and a line is a few hundred bytes.
  constexpr std::streamoff kTail = 64 * 1024;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - kTail));
  std::optional<int64_t> last;
  const std::string key = "\"step\": ";
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(key);
    if (at == std::string::npos) continue;
    const char* digits = line.c_str() + at + key.size();
    char* end = nullptr;
    const long long step = std::strtoll(digits, &end, 10);
    if (end != digits) last = step;
  }
  return last;
}

}  // namespace axonn
