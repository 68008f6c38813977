#include "checkpoint/safetensors.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/reshard.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  return out + "]";
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

}  // namespace

void export_safetensors(CheckpointReader& reader, const fs::path& out, const ReadOptions& options,
                        const std::vector<std::string>& only) {
  std::vector<const TensorInfo*> tensors;
  if (only.empty()) {
    for (const TensorInfo& t : reader.tensors()) tensors.push_back(&t);
  } else {
    for (const std::string& name : only) tensors.push_back(&reader.tensor(name));
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  tensors.erase(std::unique(tensors.begin(), tensors.end()), tensors.end());  // a name listed twice in `only`

  const Metadata& m = reader.metadata();
  std::string header = "{\"__metadata__\":{\"axonn.step\":" + json_string(std::to_string(reader.step())) +
                       ",\"axonn.layout\":" + json_string(m.layout) +
                       ",\"axonn.data_cursor\":" + json_string(std::to_string(m.data_cursor)) + "}";
  int64_t offset = 0;
  for (const TensorInfo* t : tensors) {
    header += ',';
    header += json_string(t->name);
    header += ":{\"dtype\":\"F32\",\"shape\":";
    header += json_ints(t->global_shape);
    header += ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t->bytes()) + "]}";
    offset += t->bytes();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  const fs::path partial = out.string() + ".partial";
  const std::string f = partial.string();
  auto fail = [&](const std::string& op) {
    const std::string why = std::strerror(errno);
    std::error_code ec;
    fs::remove(partial, ec);
    throw CheckpointError(f, op, op + " " + f + " failed: " + why);
  };
  {
    std::unique_ptr<FILE, FileCloser> file(std::fopen(f.c_str(), "wb"));
    if (!file) fail("create");
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
    if (std::fwrite(len, 1, 8, file.get()) != 8 ||
        std::fwrite(header.data(), 1, header.size(), file.get()) != header.size()) {
      fail("write");
    }
    std::vector<float> buf;
    for (const TensorInfo* t : tensors) {
      // Row groups of about 64 MiB: full rows are contiguous in the row-major output.
      const Rect full = full_rect(t->global_shape);
      const int64_t row_elems = row_elements(full);
      const int64_t group = std::max<int64_t>(1, (int64_t{64} << 20) / (row_elems * 4));
      for (int64_t r = 0; r < full.count[0]; r += group) {
        Rect rows = full;
        rows.offset[0] = r;
        rows.count[0] = std::min(group, full.count[0] - r);
        buf.resize(static_cast<size_t>(element_count(rows)));
        try {
          reader.read(t->name, rows, buf.data(), options);
        } catch (...) {
          // A checksum mismatch or a missing shard: leave no half-written export behind.
          std::error_code ec;
          fs::remove(partial, ec);
          throw;
        }
        if (std::fwrite(buf.data(), sizeof(float), buf.size(), file.get()) != buf.size()) fail("write");
      }
    }
    if (std::fflush(file.get()) != 0) fail("flush");
    FILE* raw = file.release();
    if (std::fclose(raw) != 0) fail("close");
  }
  if (std::rename(f.c_str(), out.c_str()) != 0) fail("rename");
}

}  // namespace axonn
