#pragma once
// What every fuzz target asserts beyond ASan and UBSan: a broken property prints what broke
// and aborts, so libFuzzer reports it as a crash and keeps the input. A parser's documented
// error types are caught by the target; any other exception escapes LLVMFuzzerTestOneInput
// and aborts the same way (std::terminate prints its what()).
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace axonn::fuzz {

// `context`: what to print when `ok` is false (the message under test, say).
inline void require(bool ok, std::string_view context = {}) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property broken; context (%zu bytes): '", context.size());
  for (char c : context) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f) {
      std::fputc(b, stderr);
    } else {
      std::fprintf(stderr, "\\x%02x", b);
    }
  }
  std::fprintf(stderr, "'\n");
  std::abort();
}

// An error message a user reads: not empty, at most `max_bytes`, and one line of printable
// ASCII (a NUL would cut what() short, a control byte would garble the terminal or the log).
inline void require_printable_line(std::string_view message, size_t max_bytes) {
  require(!message.empty() && message.size() <= max_bytes, message);
  for (char c : message) require(c >= 0x20 && c <= 0x7e, message);
}

}  // namespace axonn::fuzz
