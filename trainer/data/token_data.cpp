#include "trainer/data/token_data.hpp"

#include <algorithm>
#include <utility>

#include "trainer/data/token_file.hpp"

namespace axonn {

TokenData TokenData::load(const DataSource& source) {
  if (source.path.empty()) return builtin_corpus();
  TokenFile file = read_token_file(source.path, source.format);
  const std::string description =
      source.path + " (" + file.format + ", " + std::to_string(file.tokens.size()) + " tokens)";
  return from_tokens(std::move(file.tokens), description);
}

TokenData TokenData::from_tokens(std::vector<int32_t> tokens, std::string description) {
  TokenData data;
  data.tokens_ = std::move(tokens);
  data.description_ = std::move(description);
  return data;
}

void TokenData::validate(int vocab, int sequence, int global_batch) const {
  if (vocab < 1 || sequence < 1 || global_batch < 1)
    throw DataError("cannot check " + description_ + " against vocab " + std::to_string(vocab) + ", sequence " +
                    std::to_string(sequence) + ", global batch " + std::to_string(global_batch) +
                    ": each must be at least 1");
  if (tokens_.empty()) throw DataError(description_ + " has no tokens; point data.path at a non-empty file");

  // One pass for the largest id (vectorizes); a second only when it is out of range, to name
  // the first offender's position.
  const auto [lowest, highest] = std::minmax_element(tokens_.begin(), tokens_.end());
  if (*lowest < 0 || *highest >= vocab) {
    const auto bad = std::find_if(tokens_.begin(), tokens_.end(), [&](int32_t t) { return t < 0 || t >= vocab; });
    throw DataError(description_ + " has token id " + std::to_string(*bad) + " at position " +
                    std::to_string(bad - tokens_.begin()) + ", outside the model's vocabulary [0, " +
                    std::to_string(vocab) + "); the largest id is " + std::to_string(*highest) +
                    ": set model.vocab to at least " + std::to_string(int64_t{*highest} + 1) +
                    " or tokenize the data for this vocabulary");
  }

  // A sample is sequence+1 tokens and consecutive samples share one: (tokens-1)/sequence.
  const int64_t samples = (size() - 1) / sequence;
  if (samples < global_batch)
    throw DataError(description_ + " holds " + std::to_string(samples) + " samples of " + std::to_string(sequence + 1) +
                    " tokens (sequence " + std::to_string(sequence) + " + 1), fewer than one global batch of " +
                    std::to_string(global_batch) +
                    " samples; use a longer file, or a smaller training.global_batch or model.sequence (needs at "
                    "least " +
                    std::to_string(int64_t{global_batch} * sequence + 1) + " tokens)");
}

}  // namespace axonn
