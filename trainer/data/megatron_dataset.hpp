#pragma once
// Megatron-LM's indexed datasets (PREFIX.bin + PREFIX.idx, as tools/preprocess_data.py writes
// them) read in place, and written as Megatron's IndexedDatasetBuilder writes them.
//
// PREFIX.bin is every sequence's tokens back to back (the .idx's dtype, little-endian, no
// header); PREFIX.idx describes the sequences and documents (megatron_index.hpp). axonn trains
// on the .bin as one token stream, memory-mapped: samples are windows of T+1 tokens over it,
// across document boundaries, as for every other format.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trainer/data/mapped_file.hpp"
#include "trainer/data/megatron_index.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_sink.hpp"

namespace axonn {

// PREFIX from "PREFIX.bin", "PREFIX.idx" or "PREFIX" itself.
std::string megatron_prefix_of(const std::string& path);

// The prefix of the Megatron pair that `path` names under data.format `format`, or nothing
// when it names another kind of file:
//   "megatron": always, with a .bin or .idx suffix removed;
//   "auto":     a path ending in ".idx"; a path ending in ".bin" with PREFIX.idx beside it
//               (the .idx wins over an llm.c magic in the .bin); a path that is no file but
//               has both PREFIX.bin and PREFIX.idx beside it;
//   others:     never.
std::optional<std::string> megatron_prefix(const std::string& path, const std::string& format);

class MegatronDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin read-only (`path`: PREFIX, PREFIX.bin or PREFIX.idx) and
  // checks the index against the .bin (parse_megatron_index). Throws DataError naming the file.
  static MegatronDataset open(const std::string& path);

  const std::string& prefix() const { return prefix_; }
  std::string bin_path() const { return prefix_ + ".bin"; }
  std::string idx_path() const { return prefix_ + ".idx"; }
  // Valid while this object lives (it views the mapped .idx).
  const MegatronIndex& index() const { return index_; }
  // "Megatron indexed dataset (uint16)"
  std::string format_name() const;
  // The .bin as a token stream, sharing its mapping: nothing is copied, and the TokenData
  // keeps the mapping alive after this object is gone.
  TokenData tokens() const;

 private:
  std::string prefix_;
  std::shared_ptr<const MappedFile> idx_, bin_;
  MegatronIndex index_;
};

// Writes PREFIX.bin and PREFIX.idx as Megatron's IndexedDatasetBuilder does, one sequence per
// document: document_indices = [0, 1, ..., documents]. Streaming: each document's tokens are
// appended to the .bin as they come (through a 1 MiB buffer), and only the lengths (4 bytes
// per document) stay in memory until finish() writes the .idx.
//
// Both files are written under temporary names ("PREFIX.bin.tmp-<pid>"); finish() syncs them,
// removes an existing PREFIX.idx, renames the .bin into place, then the .idx. The .idx comes
// last, as in Megatron's builder: a reader that finds PREFIX.idx finds the .bin it describes,
// and never a .bin and .idx of two different writes. Destroyed without finish() (an error),
// the writer removes its temporary files and leaves any earlier pair's .bin in place.
// Not thread-safe: one writer per thread.
class MegatronWriter final : public TokenSink {
 public:
  // Megatron's DType.optimal_dtype: uint16 for a vocabulary below 65500, else int32.
  static TokenType dtype_for_vocab(int64_t vocab);

  // Throws DataError when the temporary .bin cannot be created.
  MegatronWriter(std::string prefix, TokenType dtype);
  MegatronWriter(const MegatronWriter&) = delete;
  MegatronWriter& operator=(const MegatronWriter&) = delete;
  ~MegatronWriter() override;

  // Appends one document of ids, each of which must fit the dtype (DataError naming the id,
  // its position in the document and the document's number otherwise). An empty document
  // is a sequence of 0 tokens, as Megatron writes it.
  void add_document(std::span<const int32_t> ids) override;
  // Writes the .idx and puts both files in place. Throws DataError; call once.
  void finish() override;
  // "Megatron indexed dataset (uint16)"
  std::string description() const override;

  int64_t documents() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t tokens() const { return tokens_; }

 private:
  void flush();
  std::string prefix_;
  TokenType dtype_;
  std::string bin_tmp_, idx_tmp_;
  int bin_fd_ = -1;
  std::vector<unsigned char> buffer_;
  std::vector<int32_t> lengths_;
  int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace axonn
