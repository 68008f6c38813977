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
//   "auto":   llm.c magic -> tokens; ".bin" suffix -> nanoGPT tokens; else text.
// An empty path means the built-in corpus (builtin_corpus()).
struct DataSource {
  std::string path;
  std::string format = "auto";
};

class TokenData {
 public:
  // Loads every token into memory (uint16 on disk, int32 here). Throws DataError.
  static TokenData load(const DataSource& source);
  static TokenData from_tokens(std::vector<int32_t> tokens, std::string description);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const int32_t* data() const { return tokens_.data(); }
  // "data/train.bin (llm.c tokens, 1234567 tokens)" or "built-in corpus (byte-level, ...)"
  const std::string& description() const { return description_; }

  // Throws DataError unless the data can train this job: not empty, every id < vocab (the
  // message names the first bad id and its position), and at least `global_batch` samples
  // of `sequence`+1 tokens (the message gives both counts and the fix).
  void validate(int vocab, int sequence, int global_batch) const;

 private:
  std::vector<int32_t> tokens_;
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

// Fills inputs and targets (count*sequence each, row-major (count, sequence)) with global
// samples first, first+1, ..., first+count-1. Throws std::invalid_argument when `order` was
// not built for this data and sequence.
void read_samples(const TokenData& data, const SampleOrder& order, int64_t first, int count, int sequence,
                  int32_t* inputs, int32_t* targets);

// The built-in corpus used when the job names no data: deterministic English-like text with
// learnable structure (a small grammar, repeated phrases, counting and arithmetic facts),
// about 1 MiB, byte-level tokens. A tiny GPT's loss falls visibly on it within tens of steps.
TokenData builtin_corpus();

// `axonn data prepare`: tokenizes `text_path` byte by byte and writes an llm.c .bin to
// out_path (through a temporary file and rename). Returns the token count.
int64_t prepare_token_file(const std::string& text_path, const std::string& out_path);

}  // namespace axonn
