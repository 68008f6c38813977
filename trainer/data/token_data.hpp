#pragma once
// Training data: a token stream (from a token file, a text file, or the built-in corpus) and
// the deterministic global order in which the trainer reads its samples.
//
// A *sample* is a window of T+1 consecutive tokens: inputs are tokens [s, s+T), targets
// [s+1, s+T+1). Sample i (0 <= i < sample_count) starts at token i*T, so the windows tile
// the stream with one token of overlap: sample_count = (tokens - 1) / T.
//
// The trainer's data cursor is a *global* sample index g = 0, 1, 2, ... that never resets:
// epoch = g / sample_count, and within an epoch a seeded permutation picks the window. Any
// data-parallel size reads the same samples in the same order, and a resumed run continues
// at the saved cursor with no sample skipped or repeated.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace axonn {

// Unusable data: the message names the file, what is wrong (empty, too short for one global
// batch, a token id >= vocab with its position, an unknown header) and what to do.
// Exit code 2: nothing was trained.
class DataError : public Error {
 public:
  explicit DataError(const std::string& message) : Error(message, exit_code::bad_input) {}
};

// File formats (all little-endian).
//   "tokens": llm.c's .bin (256 int32 header: magic 20240520, version 1, token count; then
//             uint16 tokens; llm.c's llama-3 variant, magic 20240801, version 7, has uint32
//             tokens) or, without either magic, nanoGPT's headerless uint16 .bin.
//   "text":   any file; byte-level tokens (vocabulary 256), one token per byte.
//   "megatron": Megatron-LM's indexed dataset, PREFIX.bin + PREFIX.idx (megatron_dataset.hpp);
//             `path` is PREFIX, PREFIX.bin or PREFIX.idx. Memory-mapped, never read into memory.
//   "auto":   a Megatron pair (megatron_prefix: a .idx path, a .bin path with PREFIX.idx
//             beside it, or a PREFIX that is no file but has both beside it); else llm.c
//             magic -> tokens; ".bin" suffix -> nanoGPT tokens; else text.
// An empty path means the built-in corpus (builtin_corpus()).
struct DataSource {
  std::string path;
  std::string format = "auto";
};

// How a token stream is stored: int32 in memory (every format read into memory), or one of
// Megatron's little-endian integer types in a memory-mapped file.
enum class TokenType { uint8, int8, uint16, int16, int32, int64 };
int token_type_bytes(TokenType type);
const char* token_type_name(TokenType type);  // "uint16", ...

class MappedFile;  // mapped_file.hpp

class TokenData {
 public:
  // Loads every token into memory (uint16 on disk, int32 here), except a Megatron pair, which
  // is memory-mapped. Throws DataError.
  static TokenData load(const DataSource& source);
  static TokenData from_tokens(std::vector<int32_t> tokens, std::string description);
  // `count` little-endian tokens of `type` at byte `offset` of `file`, read in place: nothing
  // is copied, and the mapping lives as long as any TokenData holding it.
  static TokenData from_mapped(std::shared_ptr<const MappedFile> file, int64_t offset, TokenType type, int64_t count,
                               std::string description);

  int64_t size() const { return size_; }
  TokenType type() const { return type_; }
  bool mapped() const { return mapped_ != nullptr; }
  // Tokens [start, start+n) as int32 into out[0, n). Requires 0 <= start, n >= 0, start+n <=
  // size() (std::out_of_range otherwise). An int64 id above 2^31-1 wraps: validate() refuses
  // such data before anything reads it.
  void copy(int64_t start, int64_t n, int32_t* out) const;
  // The id at `position`, at full width (int64 ids included).
  int64_t at(int64_t position) const;
  // The smallest and largest id, one pass over the stream (a mapped file is read once,
  // sequentially). Both 0 for no tokens.
  struct IdRange {
    int64_t lowest = 0, highest = 0;
  };
  IdRange id_range() const;
  // The first position whose id is outside [0, vocab), or -1.
  int64_t first_outside(int64_t vocab) const;
  // "data/train.bin (llm.c tokens, 1234567 tokens)" or "built-in corpus (byte-level, ...)"
  const std::string& description() const { return description_; }

  // Throws DataError unless the data can train this job: not empty, every id < vocab (the
  // message names the first bad id and its position), and at least `global_batch` samples
  // of `sequence`+1 tokens (the message gives both counts and the fix).
  void validate(int vocab, int sequence, int global_batch) const;

 private:
  // Exactly one of owned_ and mapped_ holds the tokens (neither for a default TokenData);
  // bytes_ points at the first token either way. Shared, never changed: copies are cheap.
  std::shared_ptr<const std::vector<int32_t>> owned_;
  std::shared_ptr<const MappedFile> mapped_;
  const unsigned char* bytes_ = nullptr;
  TokenType type_ = TokenType::int32;
  int64_t size_ = 0;
  std::string description_;
};

// The global sample order. sample_start(g) is the token offset of global sample g: epoch
// e = g / sample_count, window = P_e(g % sample_count), start = window * sequence, with P_e
// a permutation of [0, sample_count) keyed by (seed, e). O(1) memory and time per call
// (a keyed bijection, e.g. a Feistel network with cycle walking), identical on every
// platform and compiler (no std:: distributions).
class SampleOrder {
 public:
  // Throws DataError when the stream holds no whole sample (token_count < sequence + 1), and
  // std::invalid_argument for sequence < 1.
  SampleOrder(uint64_t seed, int64_t token_count, int sequence);
  int64_t sample_count() const { return sample_count_; }
  int sequence() const { return sequence_; }
  // Throws std::out_of_range for a negative index.
  int64_t sample_start(int64_t global_sample) const;

 private:
  uint64_t seed_;
  int64_t sample_count_;
  int sequence_;
};

// The built-in corpus used when the job names no data: deterministic English-like text with
// learnable structure (a small grammar, repeated phrases, counting and arithmetic facts),
// about 1 MiB, byte-level tokens. A tiny GPT's loss falls visibly on it within tens of steps.
TokenData builtin_corpus();

}  // namespace axonn
