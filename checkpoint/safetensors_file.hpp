#pragma once
// Reading a safetensors file, as Hugging Face writes them (its format page): an 8-byte
// little-endian header length N, N bytes of UTF-8 JSON {"__metadata__": {str: str},
// "<name>": {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, ...} (padded with
// spaces), then the data, each tensor row-major little-endian at [begin, end) of the bytes
// after the header. The file is another program's: everything the header says is checked
// before a byte of data is trusted, as the safetensors library checks it:
//   - N fits the file and at most kMaxSafetensorsHeader bytes; the JSON is one object;
//   - each tensor has a known dtype, a shape of non-negative extents, and end - begin equal
//     to the product of the shape times the dtype's size;
//   - the tensors, by begin, tile the data exactly: no overlap, no hole, the last one ending
//     at the file's end;
//   - __metadata__, if present, maps strings to strings.
// A violation throws SafetensorsError (exit code 2) naming the file, the tensor and the field.
// Data is read on demand, a range of elements at a time, so a tensor larger than memory streams.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace axonn {

class SafetensorsError : public Error {
 public:
  explicit SafetensorsError(const std::string& message) : Error(message, exit_code::bad_input) {}
};

// The safetensors library's own limit on the header.
inline constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;

enum class SafetensorsType { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, u16, u32, u64, f8_e4m3, f8_e5m2 };
// "F32", "BF16", ... as the header writes it; SafetensorsError for another name.
SafetensorsType parse_safetensors_type(const std::string& name);
const char* safetensors_type_name(SafetensorsType type);
int64_t safetensors_type_size(SafetensorsType type);  // bytes per element

struct SafetensorsTensor {
  std::string name;
  SafetensorsType dtype = SafetensorsType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // within the data, after the header
  int64_t elements() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // by begin
  std::map<std::string, std::string> metadata;
};

// The header's JSON `json`, checked against a data section of `data_bytes`; `file` names the
// file in errors. What SafetensorsFile reads, and what the fuzz target feeds.
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_bytes, const std::string& file);

class SafetensorsFile {
 public:
  // Reads and checks the header (SafetensorsError; a file that cannot be read: the same, with
  // the system's reason).
  explicit SafetensorsFile(std::filesystem::path path);

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // The tensor named `name`, or nullptr.
  const SafetensorsTensor* find(const std::string& name) const;

  // Elements [first, first + count) of `t` (row-major) as float32: F32 as stored, F64 rounded,
  // F16 and BF16 widened exactly; SafetensorsError for another dtype or a range past the
  // tensor's end. Reads only those bytes.
  void read_floats(const SafetensorsTensor& t, int64_t first, int64_t count, float* out) const;

 private:
  std::filesystem::path path_;
  uint64_t data_start_ = 0;  // 8 + N
  SafetensorsHeader header_;
};

}  // namespace axonn
