#pragma once
// One call for a resume: open `latest` (or a given step), read every slice this rank owns
// under its current layout, and return the step and metadata; optionally fall back to the
// previous committed step when the newest one is unusable.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/metadata.hpp"
#include "checkpoint/reader.hpp"

namespace axonn {

struct LoadOptions {
  // Try older committed steps, newest first, when a step fails with anything but
  // RequestMismatch (which no older step fixes). Off by default: a corrupt checkpoint
  // should stop a run unless the user asked otherwise.
  bool fallback = false;
  std::optional<int64_t> step;  // load this step instead of `latest`
  ReadOptions read;
  // Called with each step's reader before any tensor is read: throw RequestMismatch to refuse
  // the checkpoint (never fallen back from; the trainer checks the model this way).
  std::function<void(const CheckpointReader&)> check;
  // Whether a slice's tensor may be missing from the step: such a slice is left untouched and
  // named in LoadResult::absent (the trainer lets an imported checkpoint, which holds the
  // parameters only, start AdamW's moments at zero). Unset: every slice's tensor is required.
  std::function<bool(const CheckpointReader&, const SliceRead&)> may_lack;
};

struct LoadResult {
  int64_t step = 0;
  std::filesystem::path step_dir;
  Metadata metadata;
  bool fell_back = false;            // true: NOT the step asked for; log it loudly
  std::vector<std::string> skipped;  // "step-000000012: <why>" for each step given up on
  std::vector<std::string> absent;   // the slices' tensors the step lacked (LoadOptions::may_lack)
  // This rank's float32 bytes: those its slices asked for, and those read from the step's
  // shard files to fill them (more where a shard holds more than the slice, or verifying
  // reads whole checksum tiles).
  int64_t bytes_wanted = 0;
  int64_t bytes_read = 0;
};

// Fills every slice. Throws NoCheckpoint when there is nothing to load, RequestMismatch
// when the model does not match, otherwise the step's error (or, with fallback and every
// step failing, a CheckpointError listing each step and why).
//
// With several ranks, each rank reads different shards, so ranks may end on different
// steps after a fallback: agree on the minimum LoadResult::step over ranks, and reload
// with options.step set to it where a rank's step differs.
LoadResult load_checkpoint(const std::filesystem::path& dir, std::span<const SliceRead> slices,
                           const LoadOptions& options = {});

}  // namespace axonn
