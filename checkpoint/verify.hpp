#pragma once
// The "verify" tool: re-read every shard of a committed step, recompute every XXH3-64
// (block, dataset, shard) and compare with index.h5. Reports each problem with the file and
// tensor instead of stopping at the first.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace axonn {

struct VerifyProblem {
  std::string file;    // the shard (or index) file
  std::string tensor;  // "" for file-level problems
  std::string what;
};

struct VerifyReport {
  std::filesystem::path step_dir;
  int64_t step = 0;
  int shards_checked = 0;
  int64_t bytes_checked = 0;
  std::vector<VerifyProblem> problems;
  bool ok() const { return problems.empty(); }
};

// Throws CheckpointError only when index.h5 itself cannot be read (nothing to verify
// against); every shard-level problem goes into the report.
VerifyReport verify_checkpoint(const std::filesystem::path& step_dir);
// "OK: step 12, 4 shards, 1.0 GiB checked" or one line per problem.
std::string format_verify_report(const VerifyReport& report);

}  // namespace axonn
