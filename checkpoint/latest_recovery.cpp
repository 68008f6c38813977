#include "checkpoint/latest_recovery.hpp"

#include <algorithm>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/step_dir.hpp"
#include "checkpoint/verify.hpp"

namespace fs = std::filesystem;

namespace axonn {

std::optional<LatestRecovery> recover_latest(const fs::path& dir) {
  LatestRecovery recovery;
  try {
    if (read_latest(dir)) return std::nullopt;
    recovery.why = "`latest` is missing";
  } catch (const CheckpointError& e) {
    recovery.why = std::string("`latest` is unreadable: ") + e.what();
  }
  std::vector<int64_t> steps = committed_steps(dir);
  if (steps.empty()) {
    if (recovery.why == "`latest` is missing") return std::nullopt;
    throw FormatError((dir / kLatestFileName).string(), "resume",
                      recovery.why + "; no step is committed in " + dir.string() + " to resume from instead");
  }
  std::reverse(steps.begin(), steps.end());
  for (int64_t step : steps) {
    std::string problem;
    try {
      const VerifyReport report = verify_checkpoint(step_path(dir, step));
      if (report.ok()) {
        recovery.step = step;
        return recovery;
      }
      const VerifyProblem& first = report.problems.front();
      problem = first.file + (first.tensor.empty() ? "" : " (" + first.tensor + ")") + ": " + first.what;
      if (report.problems.size() > 1) problem += " (and " + std::to_string(report.problems.size() - 1) + " more)";
    } catch (const CheckpointError& e) {
      problem = e.what();
    }
    recovery.rejected.push_back(step_dir_name(step) + ": " + problem);
  }
  std::string list;
  for (const std::string& r : recovery.rejected) list += "\n  " + r;
  throw CheckpointError(dir.string(), "resume",
                        recovery.why + ", and no committed step in " + dir.string() + " verifies:" + list);
}

}  // namespace axonn
