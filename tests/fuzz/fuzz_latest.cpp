// libFuzzer target for the `latest` file of a checkpoint directory (parse_latest, what
// read_latest does with the file's bytes): anyone who can write the directory controls it,
// and `axonn train`, `axonn ckpt` and the retention code all read it.
//
// The input is the file's content. Beyond ASan and UBSan: it parses or throws FormatError
// (anything else escapes and aborts); a step it accepts is the one its step directory name
// spells; every message is one printable line, however many NULs and control bytes the
// content holds, and bounded however long the content is.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/step_dir.hpp"
#include "fuzz_checks.hpp"

using axonn::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "/scratch/run/checkpoints/latest";
  try {
    const int64_t step = axonn::parse_latest(text, path);
    require(step >= 0);
    // What write_latest would write for it reads back as the same step.
    require(axonn::parse_latest(axonn::step_dir_name(step) + "\n", path) == step);
    require(text.rfind("step-", 0) == 0);
  } catch (const axonn::FormatError& e) {
    const std::string message = e.what();
    axonn::fuzz::require_printable_line(message, 2048);
    require(message.rfind(path + " holds '", 0) == 0);
  }
  return 0;
}
