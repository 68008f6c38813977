#pragma once
// The checkpoint directory: committed steps, the `latest` pointer, retention.
//   <dir>/step-000000012/       a committed step (complete: it appears by one rename)
//   <dir>/.tmp-step-000000012/  a step being written (never loaded)
//   <dir>/.trash-step-000000004/ a step being deleted (renamed away first, so a crash
//                                 mid-deletion never leaves a half-deleted step-*)
//   <dir>/latest                "step-000000012\n", replaced atomically
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace axonn {

std::string step_dir_name(int64_t step);  // "step-000000012"
std::string shard_file_name(int rank);    // "shard-00003.h5"
inline constexpr const char* kIndexFileName = "index.h5";
inline constexpr const char* kLatestFileName = "latest";
std::filesystem::path step_path(const std::filesystem::path& dir, int64_t step);
std::filesystem::path tmp_step_path(const std::filesystem::path& dir, int64_t step);
// The step of "step-000000012" (any digit count), or nullopt.
std::optional<int64_t> parse_step_dir_name(const std::string& name);

// The step `latest` names, nullopt when there is no `latest`; FormatError when it holds
// anything but a step directory name.
std::optional<int64_t> read_latest(const std::filesystem::path& dir);
// The step named by `text`, the content of the `latest` file at `path` (for the message):
// a step directory name, then any newlines and spaces. FormatError otherwise, showing the
// content with bytes outside printable ASCII escaped (\x00) and at most 256 of them.
int64_t parse_latest(const std::string& text, const std::string& path);
// Points `latest` at `step` atomically (temp file, fsync, rename, fsync dir).
void write_latest(const std::filesystem::path& dir, int64_t step);
// Every committed step-* directory, ascending.
std::vector<int64_t> committed_steps(const std::filesystem::path& dir);

// Keeps the `keep` newest committed steps and the one `latest` names; deletes the other
// committed steps, and .tmp-step-* directories older than `current` (saves that can no
// longer complete). `protected_steps` are never deleted and not counted in `keep`: the steps
// newer than the one a run resumed from (it fell back past them, or `latest` was lost), which
// that run must not destroy. Returns the deleted committed steps.
std::vector<int64_t> apply_retention(const std::filesystem::path& dir, int keep, int64_t current,
                                     std::span<const int64_t> protected_steps = {});

// Deletes every .tmp-step-* and .trash-step-* directory: call once at start-up, on one
// rank, before any rank saves, so shards of a save that crashed are never mixed into a
// new one (shards also carry a save token that commit() checks).
void remove_uncommitted(const std::filesystem::path& dir);

}  // namespace axonn
