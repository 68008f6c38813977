#pragma once
// Resuming when `latest` is lost. A directory whose `latest` is missing (deleted by hand, a
// copy that left it out) or unreadable while steps are committed must not look empty: a run
// would start from the initial weights and its retention would then delete the committed
// steps. The run resumes from the newest committed step that verifies instead.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace axonn {

struct LatestRecovery {
  int64_t step = 0;                   // the newest committed step that verifies
  std::string why;                    // "`latest` is missing" or "`latest` is unreadable: <why>"
  std::vector<std::string> rejected;  // "step-000000030: <problem>" for each newer step
};

// nullopt when `latest` names a step (loading it is load_checkpoint's business) or when no
// step is committed (a fresh start). Otherwise verifies the committed steps newest first
// (verify_checkpoint: index.h5 and every shard's checksums) and returns the first that
// passes; CheckpointError naming each step and its problem when none does.
std::optional<LatestRecovery> recover_latest(const std::filesystem::path& dir);

}  // namespace axonn
