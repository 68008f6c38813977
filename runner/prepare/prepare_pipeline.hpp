#pragma once
// `axonn data prepare`'s work: documents in, token ids out, encoded on every core.
//
//   reader ──batches of ~1 MiB of text──▶ N encoding threads ──ids, in input order──▶ sink
//
// Each round reads 2N batches, encodes them side by side (a tokenizer's encode is const and
// safe to call from many threads), then hands every document to the sink in input order, so
// the output does not depend on the thread count. After each document comes the tokenizer's
// end-of-document id, where it has one (as Megatron-LM's --append-eod writes); a document
// that encodes to no ids (empty text) is skipped, as Megatron-LM's preprocess_data.py does.
#include <cstdint>
#include <functional>

#include "runner/prepare/documents.hpp"
#include "runner/tokenize/tokenizer.hpp"
#include "trainer/data/token_sink.hpp"

namespace axonn {

struct PrepareProgress {
  int64_t documents = 0;  // written to the sink
  int64_t tokens = 0;     // end-of-document ids included
  int64_t bytes_read = 0;
  int64_t bytes_total = 0;
  double seconds = 0;
};

struct PrepareOptions {
  int threads = 1;
  int64_t batch_bytes = int64_t{1} << 20;
  // Called after each round, on the calling thread (progress_line.hpp draws it).
  std::function<void(const PrepareProgress&)> on_progress;
};

// Tokenizes every document of `reader` into `sink` and calls sink.finish(). Returns the
// totals. Errors from the reader, the tokenizer or the sink propagate (the sink, unfinished,
// leaves nothing under its final name).
PrepareProgress prepare_documents(DocumentReader& reader, const Tokenizer& tokenizer, TokenSink& sink,
                                  const PrepareOptions& options);

}  // namespace axonn
