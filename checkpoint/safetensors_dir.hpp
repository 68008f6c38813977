#pragma once
// A Hugging Face model directory's weights: one `model.safetensors`, or shards named by
// `model.safetensors.index.json` ({"metadata": {"total_size": N}, "weight_map": {"<tensor>":
// "<shard file>", ...}}), as `save_pretrained` writes them. Every shard the index names is
// opened and its header checked (SafetensorsFile) when the directory is opened; the index and
// the shards must agree: each tensor in the weight map is in the shard it names, no shard holds
// a tensor the map does not list or puts elsewhere, no file outside the directory is named.
// A violation throws SafetensorsError (exit code 2) naming the file and the tensor. Tensors are
// then read one range at a time from their shard (SafetensorsFile::read_floats), so a model
// larger than memory streams.
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint/safetensors_file.hpp"

namespace axonn {

// The index's JSON `json` (`file` names it in errors): each tensor's shard file, in the map's
// order. SafetensorsError for a malformed index, a weight_map that is no object of strings, or
// a shard name that is empty, absolute, or leaves the directory (".."). metadata.total_size,
// when present, must be a non-negative integer.
std::vector<std::pair<std::string, std::string>> parse_safetensors_index(std::string_view json,
                                                                         const std::string& file);

class SafetensorsDir {
 public:
  // The directory's index if it has one, else its model.safetensors; SafetensorsError when it
  // has neither, or when a shard is missing or disagrees with the index.
  explicit SafetensorsDir(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  // Every tensor's name, in the index's order (one file: its header's data order).
  std::vector<std::string> names() const;

  struct Found {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };
  // The tensor and the shard that holds it; SafetensorsError naming the directory when absent.
  Found at(const std::string& name) const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<std::pair<std::string, size_t>> tensors_;  // name, shard index
};

}  // namespace axonn
