#pragma once
// TensorBoard event files, so `tensorboard --logdir runs` draws a run's scalars while it
// trains (docs/tensorboard.md). A file is <dir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>,
// a sequence of TFRecord records, each one serialized Event (tensorboard_event.proto):
//   uint64 length | uint32 masked CRC-32C of those 8 bytes | length bytes of data | uint32 masked CRC-32C of the data
// with the integers little-endian. The first record is the file_version event "brain.Event:2";
// each later one holds the scalars of one step. A new writer (a resumed run) starts a new
// file: TensorBoard merges every events file of a directory into one run.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace axonn {

// CRC-32C (Castagnoli polynomial, reflected, initial value and final xor 0xFFFFFFFF), the
// CRC TFRecord uses: crc32c("123456789") = 0xE3069283. Computed by ISA-L's crc32_iscsi.
uint32_t crc32c(const void* data, size_t size);

// TFRecord stores a CRC masked, ((crc >> 15) | (crc << 17)) + 0xa282ead8, because a CRC of
// data that itself holds CRCs is weak; unmask_crc32c gives a reader the CRC back.
uint32_t mask_crc32c(uint32_t crc);
uint32_t unmask_crc32c(uint32_t masked);

// One value of a step; TensorBoard keeps scalars as float32.
struct TensorBoardScalar {
  std::string tag;  // e.g. "train/loss": TensorBoard groups charts by the part before the '/'
  double value = 0;
};

class TensorBoardEvents {
 public:
  // Creates `dir` if needed and a new events file in it, whose first record is the
  // file_version event. It never appends to an existing file: when the name is taken (a
  // second writer in the same second and process) it gets a suffix, ".1", ".2", ...
  // Throws std::runtime_error naming the path when it cannot create or write the file.
  explicit TensorBoardEvents(const std::filesystem::path& dir);

  // One event at `step` holding every scalar, flushed, so TensorBoard shows it while the run
  // goes on. Throws std::runtime_error naming the path when the write fails.
  void write_scalars(int64_t step, double wall_time, const std::vector<TensorBoardScalar>& scalars);

  const std::filesystem::path& path() const { return path_; }

 private:
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  void write_record(const std::string& data);  // framed as above, then flushed

  std::filesystem::path path_;
  std::unique_ptr<std::FILE, CloseFile> file_;
};

}  // namespace axonn
