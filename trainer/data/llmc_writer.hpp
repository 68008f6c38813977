#pragma once
// Streaming writer of llm.c token files (formats in token_file.hpp): the GPT-2 form (uint16
// ids, magic 20240520) when the vocabulary fits 16 bits, else llm.c's llama-3 form (uint32
// ids, magic 20240801). Documents are concatenated as they come; the header's token count is
// written last, so a file of any length is written in one pass with a small buffer.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trainer/data/token_sink.hpp"

namespace axonn {

class LlmcWriter final : public TokenSink {
 public:
  // Creates "<path>.tmp-<pid>"; `vocab` (>= 1) picks the id width and bounds every id.
  // Throws DataError naming the path when it cannot be created.
  LlmcWriter(std::string path, int64_t vocab);
  LlmcWriter(const LlmcWriter&) = delete;
  LlmcWriter& operator=(const LlmcWriter&) = delete;
  ~LlmcWriter() override;

  void add_document(std::span<const int32_t> ids) override;
  void finish() override;
  std::string description() const override;

  int64_t tokens() const { return tokens_; }

 private:
  void flush_buffer();

  std::string path_;
  std::string tmp_;
  int64_t vocab_;
  int width_;  // bytes per id: 2 or 4
  int fd_ = -1;
  int64_t tokens_ = 0;
  std::vector<unsigned char> buffer_;
};

}  // namespace axonn
