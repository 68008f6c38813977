#include "trainer/data/data_mixture.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace axonn {
namespace {

// Source s's order key: the seed itself for source 0, else the seed moved along splitmix64's
// stream (its golden-ratio increment) s times; SampleOrder mixes the key again.
uint64_t source_seed(uint64_t seed, size_t s) { return seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(s); }

std::string share_text(double share) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", share);
  return text;
}

}  // namespace

DataMixture::DataMixture(std::vector<Source> sources, uint64_t seed, int sequence)
    : sources_(std::move(sources)), seed_(seed), sequence_(sequence) {
  if (sources_.empty()) throw DataError("the training data has no sources; name data.path or [[data.sources]]");
  double total = 0;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const Source& source = sources_[s];
    if (!std::isfinite(source.weight) || source.weight < 0)
      throw DataError("data source " + std::to_string(s) + " (" + source.data->description() + ") has weight " +
                      share_text(source.weight) + "; weights are finite and >= 0");
    if (source.first_token < 0 || source.tokens < 0 || source.first_token + source.tokens > source.data->size())
      throw std::invalid_argument("data source " + std::to_string(s) + ": tokens [" +
                                  std::to_string(source.first_token) + ", +" + std::to_string(source.tokens) +
                                  ") are outside " + source.data->description());
    total += source.weight;
  }
  if (!(total > 0)) throw DataError("the data sources' weights sum to 0; give at least one a positive weight");
  for (size_t s = 0; s < sources_.size(); ++s) {
    shares_.push_back(sources_[s].weight / total);
    // SampleOrder throws DataError for a range without one whole sample.
    orders_.emplace_back(source_seed(seed, s), sources_[s].tokens, sequence);
  }
}

MixtureCursor DataMixture::start() const { return {0, std::vector<int64_t>(sources_.size(), 0)}; }

std::vector<SampleRef> DataMixture::take(MixtureCursor& cursor, int64_t count) const {
  if (cursor.taken.size() != sources_.size())
    throw std::invalid_argument("DataMixture::take: the cursor counts " + std::to_string(cursor.taken.size()) +
                                " sources, the data has " + std::to_string(sources_.size()));
  std::vector<SampleRef> refs;
  refs.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const double g1 = static_cast<double>(cursor.next + 1);
    size_t pick = 0;
    double best = shares_[0] * g1 - static_cast<double>(cursor.taken[0]);
    for (size_t s = 1; s < sources_.size(); ++s) {
      const double score = shares_[s] * g1 - static_cast<double>(cursor.taken[s]);
      if (score > best) {
        best = score;
        pick = s;
      }
    }
    const int64_t n = cursor.taken[pick]++;
    refs.push_back({static_cast<int>(pick), sources_[pick].first_token + orders_[pick].sample_start(n)});
    ++cursor.next;
  }
  return refs;
}

void DataMixture::read(const SampleRef* refs, int count, int32_t* inputs, int32_t* targets) const {
  for (int i = 0; i < count; ++i) {
    const Source& source = sources_[static_cast<size_t>(refs[i].source)];
    const int64_t row = int64_t{i} * sequence_;
    source.data->copy(refs[i].start, sequence_, inputs + row);       // tokens [s, s+T)
    source.data->copy(refs[i].start + 1, sequence_, targets + row);  // tokens [s+1, s+T+1): each input's next
  }
}

void DataMixture::reseed(uint64_t seed) {
  seed_ = seed;
  for (size_t s = 0; s < sources_.size(); ++s) orders_[s] = SampleOrder(source_seed(seed, s), sources_[s].tokens, sequence_);
}

std::string DataMixture::description() const {
  const auto one = [&](size_t s) {
    const Source& source = sources_[s];
    std::string text = source.data->description();
    if (source.first_token != 0 || source.tokens != source.data->size())
      text.append(", tokens [")
          .append(std::to_string(source.first_token))
          .append(", ")
          .append(std::to_string(source.first_token + source.tokens))
          .append(")");
    return text;
  };
  if (sources_.size() == 1) return one(0);
  std::string text;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (s > 0) text.append(" + ");
    text.append(share_text(shares_[s])).append(" ").append(one(s));
  }
  return text;
}

std::string DataMixture::signature() const {
  std::string text;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (s > 0) text.append(" + ");
    text.append(share_text(shares_[s])).append(" x ").append(std::to_string(sources_[s].tokens)).append(" tokens");
    if (sources_[s].first_token != 0) text.append(" from ").append(std::to_string(sources_[s].first_token));
  }
  return text;
}

DataMixture DataMixture::single(std::shared_ptr<const TokenData> data, uint64_t seed, int sequence) {
  const int64_t tokens = data->size();
  return DataMixture({Source{std::move(data), 0, tokens, 1.0}}, seed, sequence);
}

}  // namespace axonn
