#include "trainer/data/megatron_index.hpp"

#include <cstdio>
#include <cstring>

namespace axonn {
namespace {

uint64_t le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

int32_t le32s(const unsigned char* p) {
  const uint32_t v = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  return static_cast<int32_t>(v);
}

std::string s(int64_t v) { return std::to_string(v); }
std::string u(uint64_t v) { return std::to_string(v); }

// "Megatron dataset file 'x.idx': " + what: every message starts by naming the file.
[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw DataError(std::string("Megatron dataset file '").append(file).append("': ").append(what));
}

const char* const kRecreate = "re-create the pair with Megatron-LM's tools/preprocess_data.py or axonn's writer";

}  // namespace

int32_t MegatronIndex::sequence_length(int64_t i) const { return le32s(lengths + 4 * i); }
int64_t MegatronIndex::sequence_pointer(int64_t i) const { return static_cast<int64_t>(le64(pointers + 8 * i)); }
int64_t MegatronIndex::document_index(int64_t i) const { return static_cast<int64_t>(le64(documents + 8 * i)); }

MegatronIndex parse_megatron_index(const unsigned char* bytes, int64_t size, int64_t bin_bytes,
                                   const std::string& idx_name, const std::string& bin_name) {
  const std::string& idx = idx_name;
  if (size < kMegatronHeaderBytes)
    fail(idx, "header is truncated: size is " + s(size) + " bytes, expected at least the " +
                  s(kMegatronHeaderBytes) + "-byte header (magic, version, dtype, sequence and document counts); " +
                  kRecreate);
  if (std::memcmp(bytes, kMegatronMagic, sizeof kMegatronMagic) != 0) {
    std::string found;
    for (int i = 0; i < 9; ++i) {
      const unsigned char c = bytes[i];
      if (c >= 0x20 && c < 0x7f && c != '\\') {
        found += static_cast<char>(c);
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", c);
        found += hex;
      }
    }
    fail(idx, "magic is \"" + found +
                  "\", expected \"MMIDIDX\\x00\\x00\": not a Megatron-LM MMapIndexedDataset index (data.format = "
                  "\"megatron\" reads PREFIX.bin + PREFIX.idx as Megatron's preprocess_data.py writes them)");
  }
  const uint64_t version = le64(bytes + 9);
  if (version != 1)
    fail(idx, "version is " + u(version) + ", expected 1 (the only MMapIndexedDataset version); " + kRecreate);

  MegatronIndex index;
  const int code = bytes[17];
  switch (code) {
    case 1: index.dtype = TokenType::uint8; break;
    case 2: index.dtype = TokenType::int8; break;
    case 3: index.dtype = TokenType::int16; break;
    case 4: index.dtype = TokenType::int32; break;
    case 5: index.dtype = TokenType::int64; break;
    case 8: index.dtype = TokenType::uint16; break;
    case 6:
    case 7:
      fail(idx, std::string("dtype code is ") + s(code) + " (" + (code == 6 ? "float64" : "float32") +
                    "), expected an integer token type (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16): "
                    "this dataset holds floats, not token ids, and cannot train a language model");
    default:
      fail(idx, "dtype code is " + s(code) +
                    ", expected one of 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16 (6 and 7 are floats); " +
                    kRecreate);
  }
  const int64_t width = token_type_bytes(index.dtype);

  // Counts first against the bytes present, so no product below can overflow: each array's
  // length is at most the file's size.
  const uint64_t sequences = le64(bytes + 18);
  const uint64_t entries = le64(bytes + 26);
  const auto room = static_cast<uint64_t>(size - kMegatronHeaderBytes);
  if (sequences > room / 12)
    fail(idx, "sequence count is " + u(sequences) + ", whose lengths and pointers (12 bytes each) overrun the " +
                  u(room) + " bytes after the header; the index is truncated or corrupt: " + kRecreate);
  const uint64_t after_sequences = room - 12 * sequences;
  if (entries > after_sequences / 8)
    fail(idx, "document count is " + u(entries) + ", whose document indices (8 bytes each) overrun the " +
                  u(after_sequences) + " bytes after the " + u(sequences) +
                  " sequence lengths and pointers; the index is truncated or corrupt: " + kRecreate);
  const uint64_t trailing = after_sequences - 8 * entries;

  index.sequence_count = static_cast<int64_t>(sequences);
  index.lengths = bytes + kMegatronHeaderBytes;
  index.pointers = index.lengths + 4 * sequences;
  index.documents = index.pointers + 8 * sequences;
  const int64_t n = index.sequence_count;

  // The sequences must tile the .bin in order: sequence i starts where i-1 ended. `end` stays
  // <= bin_bytes, and a length is checked against the room left, so nothing overflows.
  int64_t end = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t length = index.sequence_length(i);
    const int64_t pointer = index.sequence_pointer(i);
    if (length < 0)
      fail(idx, "sequence_lengths[" + s(i) + "] is " + s(length) + ", expected >= 0 tokens; " + kRecreate);
    if (pointer != end)
      fail(idx, "sequence_pointers[" + s(i) + "] is " + s(pointer) + ", expected " + s(end) +
                    (i == 0 ? std::string(" (the start of the .bin)") : " (the end of sequence " + s(i - 1) + ")") + ": axonn reads " + bin_name +
                    " as one token stream, which requires the sequences contiguous and in order; rewrite the "
                    "pair with Megatron's IndexedDatasetBuilder, which writes them so");
    if (length > (bin_bytes - end) / width)
      fail(bin_name, "size is " + s(bin_bytes) + " bytes, expected at least " + s(end + length * width) +
                         ", where sequence " + s(i) + " of " + idx + " ends (sequence_lengths[" + s(i) + "] = " +
                         s(length) + " " + token_type_name(index.dtype) + " tokens at byte " + s(end) +
                         "): the .bin is truncated; re-copy or re-create it");
    end += length * width;
  }
  if (end != bin_bytes)
    fail(bin_name, "size is " + s(bin_bytes) + " bytes, expected " + s(end) + ", the end of the " + s(n) +
                       " sequences " + idx + " describes (sequence_lengths sum to " + s(end / width) + " " +
                       token_type_name(index.dtype) + " tokens): " + s(bin_bytes - end) +
                       " trailing bytes; the .bin and .idx are of different datasets, or one is corrupt; " + kRecreate);
  index.token_count = end / width;

  // document_indices: [0, ..., S], never decreasing.
  if (entries == 0)
    fail(idx, "document count is 0, expected at least 1 (document_indices starts at 0 and ends at the sequence "
              "count " + s(n) + "); " + kRecreate);
  for (uint64_t i = 0; i < entries; ++i) {
    const int64_t value = index.document_index(static_cast<int64_t>(i));
    const int64_t previous = i == 0 ? 0 : index.document_index(static_cast<int64_t>(i) - 1);
    if (i == 0 && value != 0)
      fail(idx, "document_indices[0] is " + s(value) + ", expected 0 (Megatron's builder starts it at 0); " +
                    kRecreate);
    if (value < previous || value > n)
      fail(idx, "document_indices[" + u(i) + "] is " + s(value) + ", expected between document_indices[" +
                    u(i == 0 ? 0 : i - 1) + "] = " + s(previous) + " and the sequence count " + s(n) +
                    " (non-decreasing); " + kRecreate);
  }
  const int64_t last = index.document_index(static_cast<int64_t>(entries) - 1);
  if (last != n)
    fail(idx, "document_indices ends at " + s(last) + ", expected the sequence count " + s(n) +
                  " (every sequence in a document); " + kRecreate);
  index.document_count = static_cast<int64_t>(entries) - 1;

  // Megatron's multimodal builder writes one int8 mode per sequence after the document
  // indices (0 text, 1 image). Accepted: exactly S modes, all 0, i.e. a text-only dataset
  // written by that builder. Anything else after the arrays is an error.
  if (trailing == sequences && trailing > 0) {
    const unsigned char* modes = index.documents + 8 * entries;
    for (int64_t i = 0; i < n; ++i)
      if (modes[i] != 0)
        fail(idx, "sequence_modes[" + s(i) + "] is " + s(static_cast<int8_t>(modes[i])) +
                      ", expected 0 (text): this is a multimodal dataset, and axonn trains on token streams only");
  } else if (trailing != 0) {
    fail(idx, "size is " + s(size) + " bytes: " + u(trailing) + " bytes follow the " + u(entries) +
                  " document indices, expected none (or one int8 sequence mode per sequence, " + u(sequences) +
                  ", for a multimodal dataset); the header's counts are wrong or the file is corrupt: " + kRecreate);
  }
  return index;
}

}  // namespace axonn
