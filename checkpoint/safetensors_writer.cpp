#include "checkpoint/safetensors_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>
#include <utility>

#include "checkpoint/checkpoint_error.hpp"
#include "core/json_text.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

std::string ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out.append(i ? "," : "").append(std::to_string(v[i]));
  return out.append("]");
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(fs::path path, std::vector<SafetensorsEntry> entries,
                                     const std::vector<std::pair<std::string, std::string>>& metadata)
    : path_(std::move(path)), partial_(path_.string() + ".partial") {
  // Built by appending: GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + std::string chains.
  std::string header = "{";
  if (!metadata.empty()) {
    header.append("\"__metadata__\":{");
    for (const auto& [key, value] : metadata) {
      if (header.back() != '{') header.append(",");
      header.append(json_string(key)).append(":").append(json_string(value));
    }
    header.append("}");
  }
  std::set<std::string> seen;
  for (const SafetensorsEntry& e : entries) {
    if (e.name.empty() || !seen.insert(e.name).second)
      throw std::invalid_argument("SafetensorsWriter: tensor name '" + e.name + "' is empty or repeated");
    int64_t elements = 1;
    for (int64_t extent : e.shape) {
      if (extent < 0) throw std::invalid_argument("SafetensorsWriter: " + e.name + " has a negative extent");
      elements *= extent;
    }
    const int64_t bytes = 4 * elements;
    if (header.size() > 1) header.append(",");
    header.append(json_string(e.name)).append(":{\"dtype\":\"F32\",\"shape\":").append(ints(e.shape));
    header.append(",\"data_offsets\":[").append(std::to_string(data_bytes_)).append(",");
    header.append(std::to_string(data_bytes_ + bytes)).append("]}");
    data_bytes_ += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // data 8-byte aligned, as Hugging Face pads it

  file_ = std::fopen(partial_.c_str(), "wb");
  if (!file_) fail("create", std::strerror(errno));
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  if (std::fwrite(length, 1, 8, file_) != 8 || std::fwrite(header.data(), 1, header.size(), file_) != header.size())
    fail("write", std::strerror(errno));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!file_) return;
  std::fclose(file_);
  std::error_code ec;
  fs::remove(partial_, ec);
}

void SafetensorsWriter::fail(const std::string& op, const std::string& why) {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  std::error_code ec;
  fs::remove(partial_, ec);
  throw CheckpointError(partial_.string(), op, op + " " + partial_.string() + " failed: " + why);
}

void SafetensorsWriter::append(const float* data, int64_t count) {
  if (!file_) throw CheckpointError(partial_.string(), "write", "append after finish or a failure");
  const int64_t bytes = 4 * count;
  if (count < 0 || written_bytes_ + bytes > data_bytes_)
    fail("write", std::to_string(count) + " more elements run past the header's " + std::to_string(data_bytes_ / 4));
  if (std::fwrite(data, sizeof(float), static_cast<size_t>(count), file_) != static_cast<size_t>(count))
    fail("write", std::strerror(errno));
  written_bytes_ += bytes;
}

void SafetensorsWriter::finish() {
  if (!file_) throw CheckpointError(partial_.string(), "finish", "finish after finish or a failure");
  if (written_bytes_ != data_bytes_)
    fail("finish", "the tensors got " + std::to_string(written_bytes_ / 4) + " of the header's " +
                       std::to_string(data_bytes_ / 4) + " elements");
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) fail("flush", std::strerror(errno));
  std::FILE* raw = std::exchange(file_, nullptr);
  if (std::fclose(raw) != 0) {
    const std::string why = std::strerror(errno);
    std::error_code ec;
    fs::remove(partial_, ec);
    throw CheckpointError(partial_.string(), "close", "close " + partial_.string() + " failed: " + why);
  }
  std::error_code ec;
  fs::rename(partial_, path_, ec);
  if (ec) {
    fs::remove(partial_, ec);
    throw CheckpointError(path_.string(), "rename", "rename " + partial_.string() + " to " + path_.string() +
                                                        " failed: " + ec.message());
  }
}

}  // namespace axonn
