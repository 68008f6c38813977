#include "runner/ckpt/ckpt_open.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/step_dir.hpp"
#include "runner/cli/args.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

std::string committed_list(const fs::path& dir) {
  std::string out;
  for (int64_t s : committed_steps(dir)) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out.empty() ? "none" : out;
}

}  // namespace

StepChoice choose_step(const fs::path& path, std::optional<int64_t> step) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw UsageError("'" + path.string() + "' is not a directory; name a checkpoint directory (it holds `latest`) " +
                     "or a step directory (it holds index.h5)");
  const bool is_step_dir = fs::exists(path / kIndexFileName, ec);
  StepChoice choice;
  if (step) {
    if (is_step_dir)
      throw UsageError("--step " + std::to_string(*step) + " needs a checkpoint directory, and '" + path.string() +
                       "' is a step directory (it holds index.h5); name its parent instead");
    choice.checkpoint_dir = path;
    choice.step = step;
    choice.step_dir = step_path(path, *step);
    if (!fs::is_directory(choice.step_dir, ec))
      throw NoCheckpoint(choice.step_dir.string(), "open",
                         "step " + std::to_string(*step) + " is not committed in " + path.string() +
                             " (committed steps: " + committed_list(path) + ")");
    return choice;
  }
  if (is_step_dir) {
    choice.step_dir = path;
    choice.step = parse_step_dir_name(fs::absolute(path).lexically_normal().filename().string());
    // A step directory inside a checkpoint directory has its older siblings to fall back to.
    if (choice.step) choice.checkpoint_dir = fs::absolute(path).lexically_normal().parent_path();
    return choice;
  }
  choice.checkpoint_dir = path;
  choice.step = read_latest(path);
  if (!choice.step)
    throw NoCheckpoint(path.string(), "open",
                       path.string() + " holds no `latest` and no index.h5 (committed steps: " + committed_list(path) +
                           "); name a checkpoint directory, a step directory, or use --step N");
  choice.step_dir = step_path(path, *choice.step);
  return choice;
}

void require_step_dir(const StepChoice& choice) {
  std::error_code ec;
  if (fs::is_directory(choice.step_dir, ec)) return;
  throw MissingShard(
      choice.step_dir.string(), "open",
      (choice.checkpoint_dir ? (*choice.checkpoint_dir / kLatestFileName).string() : std::string("DIR")) + " names " +
          choice.step_dir.filename().string() +
          ", which does not exist; restore it, or pick an older committed step (--step N; inspect and plan also "
          "take --fallback)");
}

CheckpointReader open_step_choice(const StepChoice& choice, bool fallback, const std::string& command) {
  if (!fallback || !choice.checkpoint_dir || !choice.step) {
    require_step_dir(choice);
    return CheckpointReader(choice.step_dir);
  }
  std::vector<int64_t> candidates = {*choice.step};
  std::vector<int64_t> older = committed_steps(*choice.checkpoint_dir);
  std::reverse(older.begin(), older.end());
  for (int64_t s : older)
    if (s < *choice.step) candidates.push_back(s);
  std::string skipped;
  for (int64_t s : candidates) {
    const fs::path dir = step_path(*choice.checkpoint_dir, s);
    try {
      CheckpointReader reader(dir);
      if (s != *choice.step) {
        std::fprintf(stderr,
                     "axonn %s: WARNING: --fallback: using %s, NOT the step asked for (%s); skipped:%s\n"
                     "axonn %s: WARNING: only opening was checked (index, format, shard files); `axonn ckpt verify` "
                     "checks the checksums\n",
                     command.c_str(), dir.string().c_str(), step_dir_name(*choice.step).c_str(), skipped.c_str(),
                     command.c_str());
      }
      return reader;
    } catch (const CheckpointError& e) {
      skipped += "\n  " + step_dir_name(s) + ": " + e.what();
    }
  }
  throw CheckpointError(choice.checkpoint_dir->string(), "open",
                        "no committed step of " + choice.checkpoint_dir->string() + " opens (tried " +
                            std::to_string(candidates.size()) + "):" + skipped);
}

}  // namespace axonn
