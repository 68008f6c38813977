#pragma once
// Which committed step an `axonn ckpt` command reads. DIR is a step directory (it holds
// index.h5) or a checkpoint directory (then the step `latest` names, or `--step N`).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "checkpoint/reader.hpp"

namespace axonn {

struct StepChoice {
  std::filesystem::path step_dir;  // the step to read first
  std::optional<std::filesystem::path>
      checkpoint_dir;           // where older steps are (fallback); unknown for a renamed step dir
  std::optional<int64_t> step;  // from the directory name, when it is step-N
};

// Resolves DIR and --step without opening anything. UsageError for a path that does not
// exist or --step with a step directory; NoCheckpoint for a directory with no committed step;
// FormatError for a `latest` that names no step.
StepChoice choose_step(const std::filesystem::path& path, std::optional<int64_t> step);

// MissingShard when `latest` (or the step directory) names a step directory that does not
// exist, so a command that reads the step's files itself (verify) names the problem.
void require_step_dir(const StepChoice& choice);

// Opens the chosen step. With fallback, a step that cannot be opened (missing shard,
// corrupt index, unknown format) is skipped for the newest older committed step that opens,
// and `command` prints a loud warning on stderr naming the step used and why the others were
// skipped. Without fallback the step's own error is thrown.
CheckpointReader open_step_choice(const StepChoice& choice, bool fallback, const std::string& command);

}  // namespace axonn
