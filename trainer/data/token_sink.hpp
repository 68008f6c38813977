#pragma once
// Where `axonn data prepare` puts token ids, one document at a time and in order: an llm.c
// token file (llmc_writer.hpp) or a Megatron-LM indexed dataset pair (megatron_dataset.hpp).
// A sink streams: it never holds the corpus in memory, and nothing appears under the final
// name until finish() returns (a sink destroyed unfinished removes what it wrote).
#include <cstdint>
#include <span>
#include <string>

namespace axonn {

class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // Appends one document's ids, each in [0, vocab). Throws DataError naming the output and
  // the first id that does not fit, with its position.
  virtual void add_document(std::span<const int32_t> ids) = 0;
  // Flushes, syncs and renames into place. Throws DataError when nothing was added.
  virtual void finish() = 0;
  // "llm.c tokens (uint16)", "Megatron indexed dataset (uint16)": for the summary line.
  virtual std::string description() const = 0;
};

}  // namespace axonn
