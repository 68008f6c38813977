#pragma once
// Token files on disk (the formats are described in token_data.hpp): reading any of them into
// int32 ids in one sequential pass, and writing llm.c's GPT-2 .bin in one call (llmc_writer.hpp
// streams). Used by TokenData::load and `axonn data info`.
#include <cstdint>
#include <string>
#include <vector>

namespace axonn {

// llm.c's header: 256 little-endian int32 (1024 bytes): [0] magic, [1] version, [2] token
// count, the rest zero. The tokens follow it.
inline constexpr int kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
inline constexpr int32_t kLlmcMagic = 20240520;  // GPT-2 tokens, uint16 each
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // llama-3 tokens, uint32 each
inline constexpr int32_t kLlmcLlama3Version = 7;

struct TokenFile {
  std::vector<int32_t> tokens;
  // How the bytes were read: "llm.c tokens", "llm.c llama-3 tokens", "nanoGPT tokens" or
  // "text bytes".
  std::string format;
};

// Reads `path` as `format` ("auto", "tokens" or "text"; see DataSource). Throws DataError
// naming the file for: an unknown format, a missing or unreadable file, an empty file, a
// bad llm.c header (version, count), a size that disagrees with the header (truncated or
// trailing bytes), an odd byte count for uint16 tokens.
TokenFile read_token_file(const std::string& path, const std::string& format);

// Writes `tokens` (each in [0, 65535]) as llm.c's GPT-2 .bin (magic 20240520, version 1),
// through "<path>.tmp-<pid>" and a rename, so no reader ever sees half a file. Throws
// DataError naming the path, or the first id that does not fit with its position.
void write_llmc_file(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace axonn
