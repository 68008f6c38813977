// libFuzzer target for a Hugging Face tokenizer.json (load_bpe_tokenizer_json, what
// load_tokenizer does with a JSON file): a file downloaded with a model controls it, and
// `axonn data prepare --tokenizer` reads it before any text.
//
// The input: the file's bytes. Beyond ASan and UBSan: it loads or throws TokenizerError
// (anything else escapes and aborts), every message one printable line starting with the
// file's name; a tokenizer that loads encodes a fixed text (special tokens, accents,
// emoji, invalid UTF-8) into ids below vocab_size that decode without error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_checks.hpp"
#include "runner/tokenize/bpe_tokenizer.hpp"

using axonn::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  const std::string file = "/models/llama/tokenizer.json";
  static const std::string text =
      "Hello, world! I'M here<|endoftext|>  caf\xc3\xa9 e\xcc\x81 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 12345 "
      "\t\r\n  \xff\xfe <|im_start|>x<|begin_of_text|>";
  try {
    const auto t = axonn::load_bpe_tokenizer_json(json, file);
    const std::vector<int32_t> ids = t->encode(text);
    for (int32_t id : ids) require(id >= 0 && id < t->vocab_size(), t->description());
    t->decode(ids);
    axonn::fuzz::require_printable_line(t->description(), 4096);
  } catch (const axonn::TokenizerError& e) {
    const std::string message = e.what();
    axonn::fuzz::require_printable_line(message, 4096);
    require(message.rfind(file + ": ", 0) == 0, message);
  }
  return 0;
}
