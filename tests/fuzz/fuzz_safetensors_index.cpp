// libFuzzer target for a sharded model's model.safetensors.index.json
// (parse_safetensors_index): a downloaded model controls it, and it names the files axonn
// opens next.
//
// The input is the index's content. Beyond ASan and UBSan: it parses or throws
// SafetensorsError (anything else escapes and aborts); every shard name it accepts is a
// relative path that stays in the model's directory; every message is one printable line,
// bounded however long the names are.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "checkpoint/safetensors_dir.hpp"
#include "fuzz_checks.hpp"

using axonn::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  const std::string file = "/models/llama/model.safetensors.index.json";
  try {
    for (const auto& [name, shard] : axonn::parse_safetensors_index(json, file)) {
      const std::filesystem::path p(shard);
      require(!shard.empty() && !p.is_absolute(), shard);
      for (const auto& part : p) require(part != "..", shard);
    }
  } catch (const axonn::SafetensorsError& e) {
    const std::string message = e.what();
    axonn::fuzz::require_printable_line(message, 4096);
    require(message.rfind(file + ": ", 0) == 0, message);
  }
  return 0;
}
