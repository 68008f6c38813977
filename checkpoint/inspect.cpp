#include "checkpoint/inspect.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checksum.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/step_dir.hpp"

namespace axonn {
namespace {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string first_line(const std::string& text) {
  const std::string line = text.substr(0, text.find('\n'));
  return line.size() > 72 ? line.substr(0, 72) + "..." : line;
}

}  // namespace

std::string inspect_checkpoint(const CheckpointReader& reader) {
  const Metadata& m = reader.metadata();
  int64_t tensor_bytes = 0;
  size_t name_width = 4;
  for (const TensorInfo& t : reader.tensors()) {
    tensor_bytes += t.bytes();
    name_width = std::max(name_width, t.name.size());
  }
  std::string out = "checkpoint " + reader.step_dir().string() + "\n";
  out += "  step " + std::to_string(reader.step()) + ", format " + format::kMagic + " v" +
         std::to_string(reader.format_version()) + ", checksums " + format::kChecksumAlgorithm + "\n";
  out += "  layout '" + m.layout + "', data cursor " + std::to_string(m.data_cursor) + ", rng state " +
         std::to_string(m.rng_state.size()) + " bytes\n";
  out += "  model config (" + std::to_string(m.model_config.size()) + " bytes): " + first_line(m.model_config) + "\n";
  for (const auto& [k, v] : m.ints) out += "  " + k + " = " + std::to_string(v) + "\n";
  for (const auto& [k, v] : m.reals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out += "  " + k + " = " + buf + "\n";
  }
  for (const auto& [k, v] : m.strings) out += "  " + k + " = '" + first_line(v) + "'\n";
  out += "tensors: " + std::to_string(reader.tensors().size()) + ", " + mib(tensor_bytes) + " float32\n";
  for (const TensorInfo& t : reader.tensors()) {
    char line[512];
    std::snprintf(line, sizeof line, "  %-*s  %-20s  float32  %12s  %zu rectangles\n", static_cast<int>(name_width),
                  t.name.c_str(), shape_string(t.global_shape).c_str(), mib(t.bytes()).c_str(), t.sources.size());
    out += line;
  }
  int64_t file_bytes = 0;
  std::string shard_lines;
  for (const ShardInfo& s : reader.shards()) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(reader.step_dir() / s.file, ec);
    const int64_t on_disk = ec ? -1 : static_cast<int64_t>(size);
    file_bytes += std::max<int64_t>(on_disk, 0);
    char line[256];
    std::snprintf(line, sizeof line, "  %s  rank %5d  %4lld datasets  %12s payload  %12s file  xxh3 %s\n",
                  s.file.c_str(), s.rank, static_cast<long long>(s.datasets), mib(s.data_bytes).c_str(),
                  on_disk < 0 ? "missing" : mib(on_disk).c_str(), hex64(s.checksum).c_str());
    shard_lines += line;
  }
  out += "shards: " + std::to_string(reader.shards().size()) + ", " + mib(file_bytes) + " on disk\n" + shard_lines;
  return out;
}

}  // namespace axonn
