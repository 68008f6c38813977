#pragma once
// Writing one safetensors file (format: safetensors_file.hpp) of float32 tensors whose names
// and shapes are known before their data: the header is written first, then each tensor's
// elements are appended in the order the tensors were given, a piece at a time, so a file
// larger than memory streams. The file is written under "<path>.partial" and renamed to
// `path` by finish(); a writer destroyed before finish() removes the partial file, so an
// error never leaves a half-written file under the final name.
//
//   SafetensorsWriter w(out, {{"wte", {V, C}}, {"ln_f.weight", {C}}}, {{"format", "pt"}});
//   w.append(wte_rows, n);  ...  w.append(ln_f, C);
//   w.finish();             // CheckpointError unless every tensor got exactly its elements
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <string>
#include <vector>

namespace axonn {

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
};

class SafetensorsWriter {
 public:
  // Creates the partial file and writes the header: `entries` in the order given (their data
  // follows in that order), every one "F32"; `metadata` as the header's __metadata__, in the order given.
  // std::invalid_argument for an empty or repeated name or a negative extent; CheckpointError
  // when the file cannot be written.
  SafetensorsWriter(std::filesystem::path path, std::vector<SafetensorsEntry> entries,
                    const std::vector<std::pair<std::string, std::string>>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next `count` elements of the data, which may span tensors; CheckpointError past the
  // last tensor's end or on a failed write.
  void append(const float* data, int64_t count);
  // Flushes, fsyncs and renames to the final path; CheckpointError when any tensor is short.
  void finish();

  // The header's total bytes of tensor data: 4 x every element.
  int64_t data_bytes() const { return data_bytes_; }

 private:
  [[noreturn]] void fail(const std::string& op, const std::string& why);

  std::filesystem::path path_, partial_;
  std::FILE* file_ = nullptr;
  int64_t data_bytes_ = 0, written_bytes_ = 0;
};

}  // namespace axonn
