// libFuzzer target for a safetensors file's header (parse_safetensors_header, what
// SafetensorsFile does with the JSON after the 8-byte length): a model file downloaded from
// anywhere controls it, and `axonn ckpt` reads it before any of its data.
//
// The input: 8 bytes, little-endian, the data section's size as the file would give it; the
// rest, the header's JSON. Beyond ASan and UBSan: it parses or throws SafetensorsError
// (anything else escapes and aborts); an accepted header's tensors tile the data exactly, each
// holding its shape's elements times its dtype's size; every message is one printable line,
// bounded however long the names are.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "checkpoint/safetensors_file.hpp"
#include "fuzz_checks.hpp"

using axonn::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t data_bytes = 0;
  for (int i = 7; i >= 0; --i) data_bytes = (data_bytes << 8) | data[i];
  const std::string_view json(reinterpret_cast<const char*>(data) + 8, size - 8);
  const std::string file = "/models/llama/model.safetensors";
  try {
    const axonn::SafetensorsHeader h = axonn::parse_safetensors_header(json, data_bytes, file);
    uint64_t at = 0;
    for (const axonn::SafetensorsTensor& t : h.tensors) {
      require(t.begin == at, t.name);
      require(static_cast<uint64_t>(t.elements() * axonn::safetensors_type_size(t.dtype)) == t.end - t.begin, t.name);
      at = t.end;
    }
    require(at == data_bytes);
  } catch (const axonn::SafetensorsError& e) {
    const std::string message = e.what();
    axonn::fuzz::require_printable_line(message, 4096);
    require(message.rfind(file + ": ", 0) == 0, message);
  }
  return 0;
}
