#include "runner/cli/newest_checkpoint.hpp"

#include <cstdint>
#include <exception>
#include <optional>

#include "checkpoint/step_dir.hpp"

namespace axonn {

std::string newest_checkpoint(const JobConfig& job) {
  std::optional<int64_t> step;
  try {
    step = read_latest(job.checkpoint.dir);
  } catch (const std::exception& e) {
    return "checkpoint.dir " + job.checkpoint.dir + ": " + e.what();
  }
  if (!step) return "no checkpoint is committed in " + job.checkpoint.dir;
  return "the newest committed checkpoint is step " + std::to_string(*step) + " in " + job.checkpoint.dir +
         "; resume it at a size a layout fits";
}

}  // namespace axonn
