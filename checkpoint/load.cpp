#include "checkpoint/load.hpp"

#include <algorithm>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {

LoadResult load_checkpoint(const fs::path& dir, std::span<const SliceRead> slices, const LoadOptions& options) {
  int64_t first = 0;
  if (options.step) {
    first = *options.step;
  } else {
    const auto latest = read_latest(dir);
    if (!latest)
      throw NoCheckpoint(dir.string(), "load", "no committed checkpoint in " + dir.string() + " (no `latest`)");
    first = *latest;
  }
  std::vector<int64_t> candidates = {first};
  if (options.fallback) {
    std::vector<int64_t> older = committed_steps(dir);
    std::reverse(older.begin(), older.end());
    for (int64_t s : older) {
      if (s < first) candidates.push_back(s);
    }
  }
  LoadResult result;
  for (int64_t step : candidates) {
    try {
      std::error_code ec;
      if (!fs::is_directory(step_path(dir, step), ec)) {
        // `latest` naming a missing step is damage, not "nothing saved yet": never NoCheckpoint,
        // which a trainer takes as "start fresh".
        const std::string what = step_path(dir, step).string() + " does not exist";
        if (options.step && step == first) throw NoCheckpoint(step_path(dir, step).string(), "load", what);
        throw MissingShard(step_path(dir, step).string(), "load",
                           what + (step == first ? " but `latest` names it; restore it, or load with fallback" : ""));
      }
      CheckpointReader reader(step_path(dir, step));
      if (options.check) options.check(reader);
      result.absent.clear();
      for (const SliceRead& s : slices) {
        if (options.may_lack && !reader.has(s.name) && options.may_lack(reader, s)) {
          result.absent.push_back(s.name);
          continue;
        }
        reader.read(s, options.read);
      }
      result.step = reader.step();
      result.step_dir = reader.step_dir();
      result.metadata = reader.metadata();
      result.fell_back = step != first;
      result.bytes_read = reader.bytes_read();
      result.bytes_wanted = 0;
      for (const SliceRead& s : slices)
        result.bytes_wanted += element_count(s.rect) * static_cast<int64_t>(sizeof(float));
      return result;
    } catch (const RequestMismatch&) {
      throw;
    } catch (const CheckpointError& e) {
      if (!options.fallback) throw;
      result.skipped.push_back(step_dir_name(step) + ": " + e.what());
    }
  }
  std::string why;
  for (const std::string& s : result.skipped) why += "\n  " + s;
  throw CheckpointError(
      dir.string(), "load",
      "no loadable checkpoint in " + dir.string() + " (tried " + std::to_string(candidates.size()) + " steps):" + why);
}

}  // namespace axonn
