#pragma once
// Megatron-LM's MMapIndexedDataset index (PREFIX.idx), as megatron/core/datasets/
// indexed_dataset.py writes it (_IndexWriter). All little-endian:
//   offset 0   magic           9 bytes "MMIDIDX\0\0"
//          9   version         uint64, 1
//         17   dtype code      uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//                              7 float32, 8 uint16 (the .bin's token type)
//         18   sequence count  uint64 S
//         26   document count  uint64 D (document_indices entries: documents + 1)
//         34   sequence_lengths   int32[S]  tokens per sequence
//              sequence_pointers  int64[S]  byte offset of each sequence in PREFIX.bin
//              document_indices   int64[D]  first sequence of each document, then S:
//                                           [0, ..., S], as Megatron's builder writes it
//              sequence_modes     int8[S]   only in a multimodal dataset (see below)
// The arrays start at unaligned offsets (34, 34+4S, ...), so they are read with memcpy.
#include <cstdint>
#include <string>

#include "trainer/data/token_data.hpp"

namespace axonn {

inline constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr int64_t kMegatronHeaderBytes = 34;

// A checked view of an .idx held in memory by the caller (a mapping or a buffer), which must
// outlive it. Every field has been checked against the .idx's and the .bin's sizes.
struct MegatronIndex {
  TokenType dtype = TokenType::uint16;
  int64_t sequence_count = 0;  // S
  int64_t document_count = 0;  // D - 1: documents, not document_indices entries
  int64_t token_count = 0;     // sum of sequence_lengths = .bin bytes / dtype bytes
  // Tokens of sequence i; byte offset of sequence i in the .bin; document_indices[i], i <= documents.
  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;
  int64_t document_index(int64_t i) const;

  const unsigned char* lengths = nullptr;    // int32[S]
  const unsigned char* pointers = nullptr;   // int64[S]
  const unsigned char* documents = nullptr;  // int64[D]
};

// Parses and checks `size` bytes of an .idx against a .bin of `bin_bytes`. `idx_name` and
// `bin_name` name the files in errors. Throws DataError naming the file, the field, the value
// found, what was expected and what to do, for: a header too short, a bad magic, a version
// other than 1, an unknown or float dtype, counts whose arrays overrun the .idx, a negative
// sequence length, sequences that are not contiguous and in order in the .bin (axonn reads it
// as one token stream), a .bin shorter or longer than the sequences, document indices that do
// not rise from 0 to S, and bytes after the arrays other than a text-only multimodal
// dataset's sequence modes. Reads each byte once, allocates nothing; any input is safe.
MegatronIndex parse_megatron_index(const unsigned char* bytes, int64_t size, int64_t bin_bytes,
                                   const std::string& idx_name, const std::string& bin_name);

}  // namespace axonn
