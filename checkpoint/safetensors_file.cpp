#include "checkpoint/safetensors_file.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/json_reader.hpp"
#include "core/printable.hpp"

namespace axonn {
namespace {

struct TypeName {
  SafetensorsType type;
  const char* name;
  int64_t size;
};
constexpr std::array<TypeName, 15> kTypes = {{
    {SafetensorsType::f64, "F64", 8},
    {SafetensorsType::f32, "F32", 4},
    {SafetensorsType::f16, "F16", 2},
    {SafetensorsType::bf16, "BF16", 2},
    {SafetensorsType::i64, "I64", 8},
    {SafetensorsType::i32, "I32", 4},
    {SafetensorsType::i16, "I16", 2},
    {SafetensorsType::i8, "I8", 1},
    {SafetensorsType::u8, "U8", 1},
    {SafetensorsType::boolean, "BOOL", 1},
    {SafetensorsType::u16, "U16", 2},
    {SafetensorsType::u32, "U32", 4},
    {SafetensorsType::u64, "U64", 8},
    {SafetensorsType::f8_e4m3, "F8_E4M3", 1},
    {SafetensorsType::f8_e5m2, "F8_E5M2", 1},
}};

const TypeName& type_entry(SafetensorsType type) {
  for (const TypeName& t : kTypes)
    if (t.type == type) return t;
  return kTypes[1];
}

// IEEE binary16 -> binary32, exactly (subnormals, infinities and NaN included).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  throw SafetensorsError(file + ": " + what);
}

// Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on "\"" + s + "\"".
std::string quoted(const std::string& name) {
  std::string s = "\"";
  s += escaped_excerpt(name, 128);
  s += '"';
  return s;
}

SafetensorsTensor read_entry(const std::string& file, const std::string& name, const JsonValue& entry) {
  const std::string where = "tensor " + quoted(name);
  if (!entry.is_object()) bad(file, where + " is " + entry.type_name() + ", not an object");
  for (const auto& [key, value] : entry.object())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      bad(file, where + " has an unknown field " + quoted(key) + " (known: dtype, shape, data_offsets)");
  SafetensorsTensor t;
  t.name = name;
  try {
    t.dtype = parse_safetensors_type(entry.at("dtype").string());
    int64_t elements = 1;
    for (const JsonValue& extent : entry.at("shape").array()) {
      const int64_t n = extent.integer();
      if (n < 0) bad(file, where + " shape has a negative extent " + std::to_string(n));
      if (n > 0 && elements > std::numeric_limits<int64_t>::max() / n) bad(file, where + " shape overflows 64 bits");
      elements *= n;
      t.shape.push_back(n);
    }
    const JsonValue& offsets = entry.at("data_offsets");
    if (offsets.array().size() != 2)
      bad(file, where + " data_offsets has " + std::to_string(offsets.array().size()) + " numbers; give [begin, end]");
    const int64_t begin = offsets.at(0).integer(), end = offsets.at(1).integer();
    if (begin < 0 || end < begin)
      bad(file, where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    "] is not a range (0 <= begin <= end)");
    t.begin = static_cast<uint64_t>(begin);
    t.end = static_cast<uint64_t>(end);
    const int64_t size = safetensors_type_size(t.dtype);
    if (elements > std::numeric_limits<int64_t>::max() / size) bad(file, where + " shape overflows 64 bits");
    if (static_cast<uint64_t>(elements * size) != t.end - t.begin)
      bad(file, where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                    std::to_string(t.end - t.begin) + " bytes, but its shape and dtype " +
                    safetensors_type_name(t.dtype) + " need " + std::to_string(elements * size));
  } catch (const JsonError& e) {
    bad(file, where + ": " + e.what());
  }
  return t;
}

}  // namespace

SafetensorsType parse_safetensors_type(const std::string& name) {
  for (const TypeName& t : kTypes)
    if (name == t.name) return t.type;
  std::string known;
  for (const TypeName& t : kTypes) known += (known.empty() ? "" : ", ") + std::string(t.name);
  throw SafetensorsError("unknown dtype " + quoted(name) + " (known: " + known + ")");
}

const char* safetensors_type_name(SafetensorsType type) { return type_entry(type).name; }
int64_t safetensors_type_size(SafetensorsType type) { return type_entry(type).size; }

int64_t SafetensorsTensor::elements() const {
  int64_t n = 1;
  for (const int64_t e : shape) n *= e;
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_bytes, const std::string& file) {
  JsonValue root;
  try {
    root = parse_json(json);
  } catch (const JsonError& e) {
    bad(file, std::string("header: ") + e.what());
  }
  if (!root.is_object()) bad(file, std::string("header is ") + root.type_name() + ", not an object");
  SafetensorsHeader h;
  for (const auto& [name, entry] : root.object()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(file, std::string("__metadata__ is ") + entry.type_name() + ", not an object");
      for (const auto& [key, value] : entry.object()) {
        if (!value.is_string())
          bad(file, "__metadata__ " + quoted(key) + " is " + value.type_name() + ", not a string");
        h.metadata[key] = value.string();
      }
      continue;
    }
    try {
      h.tensors.push_back(read_entry(file, name, entry));
    } catch (const SafetensorsError& e) {
      if (std::string(e.what()).rfind(file + ": ", 0) == 0) throw;
      bad(file, "tensor " + quoted(name) + ": " + e.what());
    }
  }
  std::stable_sort(h.tensors.begin(), h.tensors.end(),
                   [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin < at)
      bad(file, "tensor " + quoted(t.name) + " data_offsets begin at " + std::to_string(t.begin) +
                    ", inside the tensor before it (which ends at " + std::to_string(at) + ")");
    if (t.begin > at)
      bad(file, "tensor " + quoted(t.name) + " data_offsets begin at " + std::to_string(t.begin) + ", leaving bytes " +
                    std::to_string(at) + " to " + std::to_string(t.begin) + " of the data to no tensor");
    at = t.end;
  }
  if (at != data_bytes)
    bad(file, "the tensors end at byte " + std::to_string(at) + " of the data, but the file holds " +
                  std::to_string(data_bytes) + " data bytes after the header");
  return h;
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
  const std::string file = path_.string();
  std::ifstream in(path_, std::ios::binary);
  if (!in) bad(file, std::string("cannot open: ") + std::strerror(errno));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path_, ec);
  if (ec) bad(file, "cannot read its size: " + ec.message());
  unsigned char length[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(length), 8))
    bad(file, "shorter than the 8-byte header length (" + std::to_string(size) + " bytes): not a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  if (n > kMaxSafetensorsHeader)
    bad(file, "header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxSafetensorsHeader) +
                  "-byte limit: not a safetensors file, or a corrupt one");
  if (n > size - 8)
    bad(file, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
                  " bytes)");
  std::string json(n, '\0');
  if (!in.read(json.data(), static_cast<std::streamsize>(n))) bad(file, "cannot read the header");
  data_start_ = 8 + n;
  header_ = parse_safetensors_header(json, size - data_start_, file);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  for (const SafetensorsTensor& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::read_floats(const SafetensorsTensor& t, int64_t first, int64_t count, float* out) const {
  const std::string file = path_.string();
  if (first < 0 || count < 0 || first > t.elements() - count)
    bad(file, "tensor " + quoted(t.name) + ": elements [" + std::to_string(first) + ", " +
                  std::to_string(first + count) + ") are outside its " + std::to_string(t.elements()));
  const int64_t size = safetensors_type_size(t.dtype);
  if (t.dtype != SafetensorsType::f32 && t.dtype != SafetensorsType::f64 && t.dtype != SafetensorsType::f16 &&
      t.dtype != SafetensorsType::bf16)
    bad(file, "tensor " + quoted(t.name) + " is " + safetensors_type_name(t.dtype) +
                  "; weights are read from F32, F64, F16 or BF16");
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + t.begin + static_cast<uint64_t>(first * size)));
  std::vector<unsigned char> bytes(static_cast<size_t>(count * size));
  if (!in || !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    bad(file, "tensor " + quoted(t.name) + ": cannot read its data");
  for (int64_t i = 0; i < count; ++i) {
    const unsigned char* b = bytes.data() + i * size;
    switch (t.dtype) {
      case SafetensorsType::f32: {
        uint32_t bits = 0;
        for (int k = 3; k >= 0; --k) bits = (bits << 8) | b[k];
        std::memcpy(out + i, &bits, sizeof bits);
        break;
      }
      case SafetensorsType::f64: {
        uint64_t bits = 0;
        for (int k = 7; k >= 0; --k) bits = (bits << 8) | b[k];
        double d;
        std::memcpy(&d, &bits, sizeof d);
        out[i] = static_cast<float>(d);
        break;
      }
      case SafetensorsType::f16:
        out[i] = half_to_float(static_cast<uint16_t>(b[0] | (b[1] << 8)));
        break;
      default:  // bf16
        out[i] = bfloat16_to_float(static_cast<uint16_t>(b[0] | (b[1] << 8)));
    }
  }
}

}  // namespace axonn
