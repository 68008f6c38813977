#include "checkpoint/step_dir.hpp"

#include <algorithm>
#include <cstdio>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"
#include "core/printable.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kTrashPrefix = ".trash-";

std::optional<int64_t> parse_prefixed(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  return parse_step_dir_name(name.substr(prefix.size()));
}

// A bad `latest` is shown up to this many bytes: a step name is 14, and what a user mistook
// for it (a path, a number) fits; a binary file does not flood the terminal.
constexpr size_t kLatestShownBytes = 256;

// Rename away, then delete: the step-* name disappears in one step.
void delete_dir(const fs::path& dir, const fs::path& victim, const std::string& trash_name) {
  const fs::path trash = dir / trash_name;
  std::error_code ec;
  fs::remove_all(trash, ec);  // a leftover of a crash mid-deletion would block the rename
  rename_path(victim, trash);
  fs::remove_all(trash, ec);
  if (ec) throw CheckpointError(trash.string(), "delete", "cannot delete " + trash.string() + ": " + ec.message());
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step-%09lld", static_cast<long long>(step));
  return buf;
}

std::string shard_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05d.h5", rank);
  return buf;
}

fs::path step_path(const fs::path& dir, int64_t step) { return dir / step_dir_name(step); }
fs::path tmp_step_path(const fs::path& dir, int64_t step) { return dir / (kTmpPrefix + step_dir_name(step)); }

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  const std::string prefix = "step-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 18)
    return std::nullopt;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

int64_t parse_latest(const std::string& text, const std::string& path) {
  std::string name = text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const auto step = parse_step_dir_name(name);
  if (!step) {
    throw FormatError(path, "read latest",
                      path + " holds '" + escaped_excerpt(text, kLatestShownBytes) +
                          "', not a step directory name like step-000000012; fix or delete it");
  }
  return *step;
}

std::optional<int64_t> read_latest(const fs::path& dir) {
  const fs::path path = dir / kLatestFileName;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return parse_latest(read_text_file(path), path.string());
}

void write_latest(const fs::path& dir, int64_t step) {
  write_file_atomic(dir / kLatestFileName, step_dir_name(step) + "\n");
}

std::vector<int64_t> committed_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    if (auto step = parse_step_dir_name(it->path().filename().string())) steps.push_back(*step);
  }
  if (ec) throw CheckpointError(dir.string(), "list", "cannot list " + dir.string() + ": " + ec.message());
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<int64_t> apply_retention(const fs::path& dir, int keep, int64_t current,
                                     std::span<const int64_t> protected_steps) {
  const std::optional<int64_t> latest = read_latest(dir);
  std::vector<int64_t> steps;
  for (int64_t s : committed_steps(dir))
    if (std::find(protected_steps.begin(), protected_steps.end(), s) == protected_steps.end()) steps.push_back(s);
  std::vector<int64_t> removed;
  const size_t kept_newest = static_cast<size_t>(std::max(keep, 1));
  for (size_t i = 0; i + kept_newest < steps.size(); ++i) {
    if (latest && steps[i] == *latest) continue;
    delete_dir(dir, step_path(dir, steps[i]), kTrashPrefix + step_dir_name(steps[i]));
    removed.push_back(steps[i]);
  }
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto tmp_step = parse_prefixed(name, kTmpPrefix);
    if ((tmp_step && *tmp_step < current) || parse_prefixed(name, kTrashPrefix)) stale.push_back(it->path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);  // best effort: leftovers are never loaded
  if (!removed.empty()) fsync_dir(dir);
  return removed;
}

void remove_uncommitted(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (parse_prefixed(name, kTmpPrefix) || parse_prefixed(name, kTrashPrefix)) stale.push_back(it->path());
  }
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    if (ec) throw CheckpointError(p.string(), "delete", "cannot delete " + p.string() + ": " + ec.message());
  }
}

}  // namespace axonn
