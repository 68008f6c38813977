#pragma once
// The trainer's state in the checkpoint format (checkpoint/README.md): every parameter at its
// global name ("wte", "h.0.attn.qkv.weight", ...; what h5py users read), its AdamW moments at
// "adam.m/<name>" and "adam.v/<name>", and the metadata a resume needs (step, data cursor,
// sample-order seed, model config, layout). Gradients are zero at a step boundary and are
// not saved. A resume at any layout reads the rectangles the new layout owns.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/async_saver.hpp"
#include "checkpoint/load.hpp"
#include "trainer/train/trainer.hpp"

namespace axonn {

// The model section as one canonical line, stored in the checkpoint and compared on load:
// "layers=2 hidden=64 heads=4 vocab=256 sequence=64".
std::string model_config_text(const ModelShape& model);

// The metadata string (meta.str.imported_from) that marks a step `axonn ckpt import-hf` wrote
// from another program's weights (its value: the directory they came from). Such a step holds
// the parameters only; a resume from it starts AdamW's moments at zero.
inline constexpr const char* kImportedFrom = "imported_from";

// Bytes of tensor data in one committed step of `model`: every parameter and its two AdamW
// moments, float32 (the files add HDF5's metadata and the checksums, a few KiB per tensor).
int64_t checkpoint_payload_bytes(const ModelShape& model);

// Every rank writes one shard (possibly empty): of the copies of a rectangle (ranks that
// differ only along the tensor's replica axes) the one whose replica index equals the
// rectangle's index (in state_slices' order) modulo the number of copies writes it, so the
// writing is spread over the replicas without any coordination. With the optimizer sharded,
// the data ranks hold different parts of the moments, so the data axis is no replica axis for
// them: each part is written by one of the ranks that hold it. Rank 0 commits.
// The tensors are the same global tensors in every mode, so a checkpoint saved sharded
// resumes unsharded, at another layout, and back.
class TrainingCheckpoint {
 public:
  TrainingCheckpoint(std::filesystem::path dir, Trainer& trainer, int rank, SaverOptions options);

  // Starts an asynchronous save of the trainer's current state (step() steps done). The
  // caller blocks only while the state is copied into host buffers; returns that time.
  std::chrono::nanoseconds save(double last_lr);
  // Waits for a save in flight; rethrows its error.
  void wait();
  // Rethrows the error of a finished save (call once per step); true when none is in flight.
  bool poll();
  // Leaving after a failure: a commit in flight stops waiting for shards (AsyncSaver::abandon).
  void abandon() { saver_.abandon(); }

  // Loads `latest` (or, with fallback, the newest loadable step) into the trainer and sets
  // its step, data cursor and sample order. nullopt when the directory holds no checkpoint.
  // Throws RequestMismatch naming both configs when the checkpoint is of another model, and
  // the checkpoint library's typed errors (checksum, missing shard, format) otherwise.
  std::optional<LoadResult> load(bool fallback, std::optional<int64_t> step = std::nullopt);
  // The same from elsewhere than the checkpoint directory (the memory copies' restore): `fill`
  // fills the slices this rank reads, as load_checkpoint would, and returns the step and its
  // metadata (LoadResult's step, step_dir naming the source, metadata); then the step, data
  // cursor and sample order are set as by load(). A fill that throws leaves the trainer as
  // it was only if it wrote no slice.
  using FillSlices = std::function<LoadResult(std::span<const SliceRead> reads)>;
  LoadResult load_from(const FillSlices& fill);
  // A resume on data other than the checkpoint's (data_position.hpp) goes on instead of
  // throwing DataError; data_change() then says what changed, for the log.
  void allow_data_change(bool allowed) { data_changed_ = allowed; }
  const std::string& data_change() const { return data_change_; }

  // Keeps the committed steps newer than `start_step` (those a resume fell back past, or
  // that `latest` no longer named) out of every later save's retention; returns them.
  const std::vector<int64_t>& protect_steps_after(int64_t start_step);

  const std::filesystem::path& dir() const { return dir_; }
  // Bytes of the slices this rank writes: what the saver's host buffers hold after a save.
  int64_t staged_bytes();

 private:
  // Where a state slice lives: in the trainer's buffers, or, when the device is not the
  // host, in staging_ (params | adam_m | adam_v | master).
  float* device_data(const StateSlice& s);
  float* staged_data(const StateSlice& s);
  bool writes(size_t index, const StateSlice& slice) const;

  std::filesystem::path dir_;
  Trainer& trainer_;
  int rank_;
  AsyncSaver saver_;
  std::vector<StateSlice> slices_;       // what this rank holds and saves: state_slices of its store
  std::vector<StateSlice> load_slices_;  // what it reads on resume: the same with every parameter whole
  std::vector<float> staging_;      // host copy of params | m | v when the device is not the host
  std::vector<int64_t> protected_steps_;
  bool data_changed_ = false;
  std::string data_change_;
};

}  // namespace axonn
