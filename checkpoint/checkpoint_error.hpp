#pragma once
// Typed errors of the checkpoint library. Every message names the file (when there is one),
// what was expected and what was found, and what to do. Callers that only care "did the
// checkpoint load" catch CheckpointError; the trainer distinguishes:
//   NoCheckpoint      nothing committed yet: start fresh
//   DirectoryUnavailable  the directory cannot be used by this run at all (another run holds
//                     its lock, it is not writable): a bad input, nothing was started
//   RequestMismatch   the caller asked for something the checkpoint does not hold (a tensor
//                     name or global shape): a config problem, never fixed by falling back
//   everything else   the checkpoint on disk is unusable (corrupt, torn, unknown format):
//                     load(... fallback) may try the previous committed step
#include <string>
#include <utility>

#include "core/error.hpp"

namespace axonn {

// Exit code 1, except the two that mean nothing was started (exit code 2): NoCheckpoint and
// DirectoryUnavailable.
class CheckpointError : public Error {
 public:
  // file: the file or directory concerned ("" when none); operation: what we were doing.
  CheckpointError(std::string file, std::string operation, const std::string& message)
      : CheckpointError(std::move(file), std::move(operation), message, exit_code::failure) {}
  const std::string& file() const { return file_; }
  const std::string& operation() const { return operation_; }

 protected:
  CheckpointError(std::string file, std::string operation, const std::string& message, int exit_code)
      : Error(message, exit_code), file_(std::move(file)), operation_(std::move(operation)) {}

 private:
  std::string file_;
  std::string operation_;
};

// A stored checksum does not match the bytes read back.
class ChecksumMismatch : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Wrong magic or a format version this build does not read.
class FormatError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// A shard or index file the checkpoint names is absent.
class MissingShard : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// commit() gave up waiting for the shards of some ranks; `latest` was not changed.
class CommitTimeout : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// The requested tensor is absent or its global shape differs from the stored one.
class RequestMismatch : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// The directory has no committed step (no `latest`, or a requested step is absent).
class NoCheckpoint : public CheckpointError {
 public:
  NoCheckpoint(std::string file, std::string operation, const std::string& message)
      : CheckpointError(std::move(file), std::move(operation), message, exit_code::bad_input) {}
};

// The checkpoint directory cannot be used by this run: another run holds its lock
// (dir_lock.hpp), or it cannot be created or written. The message names the directory, the
// holder or the failing call, and what to do.
class DirectoryUnavailable : public CheckpointError {
 public:
  DirectoryUnavailable(std::string file, std::string operation, const std::string& message)
      : CheckpointError(std::move(file), std::move(operation), message, exit_code::bad_input) {}
};

// A save ran out of space. The message is one line: the file, the bytes it still needed and
// what the file system had free; `latest` is unchanged.
class DiskFull : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

}  // namespace axonn
