// libFuzzer target for the token-file readers (trainer/data): llm.c's 1024-byte header (GPT-2
// uint16 and llama-3 uint32 tokens), nanoGPT's headerless uint16 .bin and text bytes, as a
// job's [data] path or `axonn data info` reads them, then the check against a model.
//
// The first input byte picks the data.format ("auto", "tokens", "text"), the file's suffix
// (.bin or .txt) and the vocabulary; the rest is the file, written to a scratch folder (in
// /dev/shm when there is one) and read with TokenData::load, as the trainer does. Beyond ASan
// and UBSan: it loads or throws DataError (anything else escapes and aborts); what loads has
// the token count the file's size and header give, no negative id; every message names the
// file and is one printable line.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_checks.hpp"
#include "fuzz_scratch_dir.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace {

using axonn::fuzz::require;

void check_message(const axonn::DataError& e, const std::string& path) {
  const std::string m = e.what();
  axonn::fuzz::require_printable_line(m, 1024);
  require(m.find(path) != std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const axonn::fuzz::ScratchDir scratch("token");
  if (size == 0) return 0;
  static const char* const kFormats[] = {"auto", "tokens", "text", "auto"};
  static const int kVocabs[] = {256, 50257, 65536, 128256, 2, 1, 1 << 30, 2147483647};
  const std::string format = kFormats[data[0] & 3];
  const std::string path = scratch.path() + ((data[0] & 4) ? "/data.bin" : "/data.txt");
  const int vocab = kVocabs[(data[0] >> 3) & 7];
  const int64_t bytes = static_cast<int64_t>(size) - 1;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(bytes));
    require(static_cast<bool>(out));
  }
  axonn::TokenData tokens;
  try {
    tokens = axonn::TokenData::load(axonn::DataSource{path, format});
  } catch (const axonn::DataError& e) {
    check_message(e, path);
    return 0;
  }
  // The count the bytes give: one per byte, two per uint16, or llm.c's header count.
  const int64_t n = tokens.size();
  const std::string& what = tokens.description();
  require(what.rfind(path + " (", 0) == 0);
  if (what.find("(text bytes,") != std::string::npos) {
    require(n == bytes);
  } else if (what.find("(nanoGPT tokens,") != std::string::npos) {
    require(2 * n == bytes);
  } else {
    const bool llama3 = what.find("(llm.c llama-3 tokens,") != std::string::npos;
    require(llama3 || what.find("(llm.c tokens,") != std::string::npos);
    require(axonn::kLlmcHeaderBytes + (llama3 ? 4 : 2) * n == bytes);
  }
  require(n == 0 || tokens.id_range().lowest >= 0);
  try {
    tokens.validate(vocab, 4, 2);
  } catch (const axonn::DataError& e) {
    check_message(e, path);
  }
  return 0;
}
