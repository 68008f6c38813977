// libFuzzer target for Megatron-LM's .idx parser (trainer/data/megatron_index.hpp), which a
// job's data.path = PREFIX reaches before any token is read.
//
// Input: 4 bytes, little-endian, the .bin's size in bytes (0xffffffff stands for 2^63-1, to
// reach the overflow checks), then the .idx's bytes. Beyond ASan and UBSan: it parses or
// throws DataError (anything else escapes and aborts); every message names one of the two
// files and is one printable line; what parses is consistent: the sequences tile the .bin
// (each pointer is the running sum of length * dtype bytes, the last ends at the .bin's size),
// and the document indices rise from 0 to the sequence count.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_checks.hpp"
#include "trainer/data/megatron_index.hpp"

namespace {

using axonn::fuzz::require;

const std::string kIdx = "/data/corpus_text_document.idx";
const std::string kBin = "/data/corpus_text_document.bin";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint32_t declared = uint32_t{data[0]} | uint32_t{data[1]} << 8 | uint32_t{data[2]} << 16 |
                            uint32_t{data[3]} << 24;
  const int64_t bin_bytes = declared == 0xffffffffu ? INT64_MAX : int64_t{declared};
  const auto idx_bytes = static_cast<int64_t>(size) - 4;
  axonn::MegatronIndex index;
  try {
    index = axonn::parse_megatron_index(data + 4, idx_bytes, bin_bytes, kIdx, kBin);
  } catch (const axonn::DataError& e) {
    const std::string m = e.what();
    axonn::fuzz::require_printable_line(m, 1024);
    require(m.find(kIdx) != std::string::npos || m.find(kBin) != std::string::npos, m);
    return 0;
  }
  const int64_t width = axonn::token_type_bytes(index.dtype);
  int64_t end = 0;
  for (int64_t i = 0; i < index.sequence_count; ++i) {
    require(index.sequence_length(i) >= 0);
    require(index.sequence_pointer(i) == end);
    end += index.sequence_length(i) * width;
  }
  require(end == bin_bytes && index.token_count * width == bin_bytes);
  require(index.document_index(0) == 0 && index.document_index(index.document_count) == index.sequence_count);
  for (int64_t i = 1; i <= index.document_count; ++i)
    require(index.document_index(i) >= index.document_index(i - 1));
  return 0;
}
