#include "runner/prepare/prepare_pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace axonn {
namespace {

using Clock = std::chrono::steady_clock;

// One batch's documents and, after encoding, their ids (end-of-document included).
struct Batch {
  std::vector<std::string> documents;
  std::vector<std::vector<int32_t>> ids;
};

// Encodes `batches` on `threads` threads; the first exception any thread raised is rethrown.
void encode_all(std::vector<Batch>& batches, size_t count, const Tokenizer& tokenizer, int threads) {
  const std::optional<int32_t> end_of_document = tokenizer.end_of_document();
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    for (size_t b = next++; b < count; b = next++) {
      try {
        Batch& batch = batches[b];
        batch.ids.resize(batch.documents.size());
        for (size_t d = 0; d < batch.documents.size(); ++d) {
          batch.ids[d] = tokenizer.encode(batch.documents[d]);
          if (end_of_document && !batch.ids[d].empty()) batch.ids[d].push_back(*end_of_document);
        }
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = count;  // the others stop after their current batch
      }
    }
  };
  std::vector<std::thread> pool;
  const int extra = std::min<int>(threads, static_cast<int>(count)) - 1;
  for (int t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

PrepareProgress prepare_documents(DocumentReader& reader, const Tokenizer& tokenizer, TokenSink& sink,
                                  const PrepareOptions& options) {
  const int threads = std::max(1, options.threads);
  const auto start = Clock::now();
  PrepareProgress progress;
  progress.bytes_total = reader.bytes_total();
  std::vector<Batch> batches(static_cast<size_t>(2 * threads));
  for (;;) {
    size_t count = 0;
    while (count < batches.size() && reader.next_batch(batches[count].documents, options.batch_bytes)) ++count;
    if (count == 0) break;
    encode_all(batches, count, tokenizer, threads);
    for (size_t b = 0; b < count; ++b) {
      for (const std::vector<int32_t>& ids : batches[b].ids) {
        if (ids.empty()) continue;
        sink.add_document(ids);
        ++progress.documents;
        progress.tokens += static_cast<int64_t>(ids.size());
      }
    }
    progress.bytes_read = reader.bytes_read();
    progress.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (options.on_progress) options.on_progress(progress);
  }
  sink.finish();
  progress.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return progress;
}

}  // namespace axonn
