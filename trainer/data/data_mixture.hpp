#pragma once
// The training data as the trainer reads it: one or more token streams (sources), each a
// range of a TokenData with its own seeded sample order (token_data.hpp), and the schedule
// that decides which source each global sample comes from.
//
// The schedule is Megatron-LM's blend: global sample g comes from the source s that
// maximizes w_s·(g+1) − n_s, where w_s is s's weight over the sum of the weights and n_s the
// samples taken from s before g (the lowest s on a tie). After any g samples every source has
// given its share to within one sample, so each global batch holds the mixture. The schedule
// depends on (g, n_s) only: a MixtureCursor saved in a checkpoint continues it exactly, at any
// data-parallel size. Source s's n-th sample is window order_s(n) of its range, order_s a
// SampleOrder keyed by the seed (source 0) or by the seed mixed with s, so a job of one source
// reads exactly the samples it did before mixtures existed.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/data/token_data.hpp"

namespace axonn {

struct MixtureCursor {
  int64_t next = 0;            // the next global sample
  std::vector<int64_t> taken;  // per source: samples taken from it so far
  bool operator==(const MixtureCursor&) const = default;
};

// One sample: its source and the token offset of its window in that source's TokenData.
struct SampleRef {
  int source = 0;
  int64_t start = 0;
};

class DataMixture {
 public:
  struct Source {
    std::shared_ptr<const TokenData> data;
    int64_t first_token = 0;  // the source is tokens [first_token, first_token + tokens) of data
    int64_t tokens = 0;
    double weight = 1;
  };

  // Throws DataError for no sources, a negative or non-finite weight, weights summing to 0,
  // and a range that holds no whole sample (sequence + 1 tokens).
  DataMixture(std::vector<Source> sources, uint64_t seed, int sequence);

  int source_count() const { return static_cast<int>(sources_.size()); }
  const Source& source(int s) const { return sources_[static_cast<size_t>(s)]; }
  int64_t samples_of(int s) const { return orders_[static_cast<size_t>(s)].sample_count(); }
  int sequence() const { return sequence_; }
  uint64_t seed() const { return seed_; }

  // The cursor of a run that has read nothing: next 0, nothing taken from any source.
  MixtureCursor start() const;
  // Samples [cursor.next, cursor.next + count) of the schedule; advances `cursor` past them.
  // Throws std::invalid_argument for a cursor of another source count.
  std::vector<SampleRef> take(MixtureCursor& cursor, int64_t count) const;
  // Fills inputs and targets (count·sequence each, row-major (count, sequence)) with the
  // windows refs[0..count): inputs tokens [s, s+T), targets [s+1, s+T+1).
  void read(const SampleRef* refs, int count, int32_t* inputs, int32_t* targets) const;
  // Keys every source's order by `seed` (a resumed run continues the order it saved).
  void reseed(uint64_t seed);

  // "data/web.bin (llm.c tokens, 1234 tokens)" for one source; for a mixture each source's
  // description with its share: "0.3 data/web (...) + 0.7 data/code.bin (...)".
  std::string description() const;
  // What a checkpoint compares on resume (train/data_position.hpp): each source's share and
  // token range, "0.3 x 12345 tokens + 0.7 x 678 tokens from 100"; paths are not part of it,
  // so moved data resumes.
  std::string signature() const;

  // A mixture of one source: all of `data`.
  static DataMixture single(std::shared_ptr<const TokenData> data, uint64_t seed, int sequence);

 private:
  std::vector<Source> sources_;
  std::vector<double> shares_;  // weights over their sum
  std::vector<SampleOrder> orders_;
  uint64_t seed_;
  int sequence_;
};

// A job's data as the training run uses it.
struct TrainingData {
  DataMixture train;
  std::optional<DataMixture> held_out;  // run.eval_interval's, where the job holds data out
};

}  // namespace axonn
