#include "checkpoint/commit.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"
#include "checkpoint/index_file.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/shard_meta.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

using Clock = std::chrono::steady_clock;

// Polls for the expected shards; returns their metadata by rank.
std::map<int, ShardMeta> wait_for_shards(const fs::path& tmp, int64_t step, std::span<const int> expected,
                                         std::chrono::milliseconds timeout, const std::string& token,
                                         const std::stop_token& stop, std::chrono::milliseconds after_stop) {
  const auto deadline = Clock::now() + timeout;
  std::optional<Clock::time_point> abandon_at;  // set when `stop` is first seen
  std::set<int> pending(expected.begin(), expected.end());
  std::map<int, std::string> why;  // rank -> reason it is still pending
  std::map<int, ShardMeta> metas;
  // "rank 3: no shard-00003.h5, rank 5: ...", at most 8 of them.
  auto pending_list = [&] {
    std::string list;
    size_t shown = 0;
    for (int r : pending) {
      if (shown++ == 8) {
        list += ", ...";
        break;
      }
      list += (list.empty() ? "rank " : ", rank ") + std::to_string(r) + ": " + why[r];
    }
    return list;
  };
  auto poll = std::chrono::milliseconds(2);
  while (true) {
    for (auto it = pending.begin(); it != pending.end();) {
      const fs::path path = tmp / shard_file_name(*it);
      std::error_code ec;
      if (!fs::exists(path, ec)) {
        why[*it] = "no " + path.filename().string();
        ++it;
        continue;
      }
      ShardMeta meta = read_shard_meta(path);  // complete by construction (renamed after fsync)
      if (meta.save_token != token || meta.step != step || meta.rank != *it) {
        why[*it] = path.filename().string() + " is from another save (step " + std::to_string(meta.step) + ", token '" +
                   meta.save_token + "'; expected step " + std::to_string(step) + ", token '" + token + "')";
        ++it;
        continue;
      }
      metas.emplace(*it, std::move(meta));
      it = pending.erase(it);
    }
    if (pending.empty()) return metas;
    const std::string missing =
        std::to_string(pending.size()) + " of " + std::to_string(expected.size()) + " shards in " + tmp.string();
    if (stop.stop_requested() && !abandon_at) abandon_at = Clock::now() + after_stop;
    if (abandon_at && Clock::now() >= *abandon_at)
      throw CheckpointError(tmp.string(), "commit",
                            "commit of step " + std::to_string(step) +
                                " abandoned: this rank is leaving after a failure, and " +
                                std::to_string(after_stop.count()) + " ms later " + missing + " were still missing (" +
                                pending_list() + "); `latest` is unchanged and names the newest committed step");
    if (Clock::now() >= deadline)
      throw CommitTimeout(tmp.string(), "commit",
                          "commit of step " + std::to_string(step) + " timed out after " +
                              std::to_string(timeout.count()) + " ms waiting for " + missing + " (" + pending_list() +
                              "); `latest` is unchanged: check that those ranks reached this step's save");
    const Clock::time_point until = abandon_at ? std::min(deadline, *abandon_at) : deadline;
    std::this_thread::sleep_for(std::min(
        poll,
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()) + std::chrono::milliseconds(1)));
    poll = std::min(poll * 2, std::chrono::milliseconds(100));
  }
}

// Groups the shards' slices by tensor and checks each tensor is covered exactly once.
std::vector<TensorInfo> build_table(const std::map<int, ShardMeta>& metas, const fs::path& tmp) {
  std::map<std::string, TensorInfo> tensors;
  for (const auto& [rank, meta] : metas) {
    for (const ShardSlice& s : meta.slices) {
      TensorInfo& t = tensors[s.tensor];
      if (t.sources.empty()) {
        t.name = s.tensor;
        t.global_shape = s.global_shape;
      } else if (t.global_shape != s.global_shape) {
        throw CheckpointError(tmp.string(), "commit",
                              "tensor '" + s.tensor + "' has global shape " + shape_string(t.global_shape) + " in " +
                                  t.sources.front().file + " but " + shape_string(s.global_shape) + " in " +
                                  shard_file_name(rank) + ": all ranks must describe the same model");
      }
      // A version-1 shard (cols_per_block = all its columns) indexes as it is: its row blocks are
      // the full-width tiles of versions 2 and 3 (it is read by its own storage, contiguous).
      t.sources.push_back(StoredRect{rank, shard_file_name(rank), s.dataset, s.rect, s.rows_per_block, s.cols_per_block,
                                     s.block_hashes, s.xxh3});
    }
  }
  std::vector<TensorInfo> table;
  for (auto& [name, t] : tensors) {
    std::vector<Rect> rects;
    int64_t covered = 0;
    for (const StoredRect& s : t.sources) {
      rects.push_back(s.rect);
      covered += element_count(s.rect);
    }
    if (auto pair = find_overlap(rects)) {
      const StoredRect& a = t.sources[pair->first];
      const StoredRect& b = t.sources[pair->second];
      const bool same = a.rect == b.rect;
      throw CheckpointError(
          tmp.string(), "commit",
          "tensor '" + name + "': " +
              (same ? "rectangle " + rect_string(a.rect) + " is written by both "
                    : "rectangles " + rect_string(a.rect) + " and " + rect_string(b.rect) + " overlap, written by ") +
              a.file + " and " + b.file +
              (same ? ": data-parallel replicas must write each rectangle once (use assign_writers)" : ""));
    }
    if (covered != element_count(t.global_shape)) {
      throw CheckpointError(tmp.string(), "commit",
                            "tensor '" + name + "' " + shape_string(t.global_shape) + ": the shards store " +
                                std::to_string(covered) + " of its " + std::to_string(element_count(t.global_shape)) +
                                " elements; some rank did not write its part, or expected_ranks misses a writer");
    }
    table.push_back(std::move(t));
  }
  return table;
}

// Removes files in the temporary directory that are not part of this save.
void remove_strays(const fs::path& tmp, const std::map<int, ShardMeta>& metas) {
  std::set<std::string> keep;
  for (const auto& [rank, meta] : metas) keep.insert(shard_file_name(rank));
  std::error_code ec;
  std::vector<fs::path> strays;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    if (!keep.count(it->path().filename().string())) strays.push_back(it->path());
  }
  for (const fs::path& p : strays) fs::remove_all(p, ec);
}

}  // namespace

CommitResult commit(const fs::path& dir, int64_t step, std::span<const int> expected_ranks, const Metadata& metadata,
                    int keep, std::chrono::milliseconds timeout, const std::string& save_token,
                    std::span<const int64_t> protected_steps, std::stop_token stop,
                    std::chrono::milliseconds after_stop) {
  if (expected_ranks.empty()) throw std::invalid_argument("commit: expected_ranks is empty");
  if (std::set<int>(expected_ranks.begin(), expected_ranks.end()).size() != expected_ranks.size()) {
    throw std::invalid_argument("commit: expected_ranks lists a rank twice");
  }
  if (keep < 1) throw std::invalid_argument("commit: keep must be at least 1, got " + std::to_string(keep));
  const fs::path tmp = tmp_step_path(dir, step);
  make_dirs(tmp);
  const std::map<int, ShardMeta> metas =
      wait_for_shards(tmp, step, expected_ranks, timeout, save_token, stop, after_stop);

  IndexContents index;
  index.step = step;
  index.save_token = save_token;
  index.metadata = metadata;
  index.tensors = build_table(metas, tmp);
  CommitResult result;
  for (const auto& [rank, meta] : metas) {
    index.shards.push_back(ShardInfo{rank, shard_file_name(rank), meta.checksum, meta.data_bytes(),
                                     static_cast<int64_t>(meta.slices.size())});
    result.data_bytes += meta.data_bytes();
  }
  remove_strays(tmp, metas);
  write_index(tmp / kIndexFileName, index);
  fsync_dir(tmp);

  result.step_dir = step_path(dir, step);
  result.shards = static_cast<int>(metas.size());
  std::error_code ec;
  if (fs::exists(result.step_dir, ec)) {
    // Saving a step again (a resumed run reaching it a second time): swap in one step, so
    // step-N is always a complete checkpoint, then delete the old one.
    exchange_paths(tmp, result.step_dir);
    result.replaced_existing = true;
    fsync_dir(dir);
    fs::remove_all(tmp, ec);
  } else {
    rename_path(tmp, result.step_dir);
    fsync_dir(dir);
  }
  write_latest(dir, step);
  result.removed_steps = apply_retention(dir, keep, step, protected_steps);
  return result;
}

}  // namespace axonn
