#include "trainer/train/data_position.hpp"

#include <algorithm>

namespace axonn {
namespace {

constexpr const char* kMixtureKey = "data.mixture";
const std::string kTakenPrefix = "data.taken.";

}  // namespace

void write_data_position(Metadata& md, const DataMixture& data, const MixtureCursor& cursor) {
  md.data_cursor = cursor.next;
  md.strings[kMixtureKey] = data.signature();
  for (size_t s = 0; s < cursor.taken.size(); ++s) md.ints[kTakenPrefix + std::to_string(s)] = cursor.taken[s];
}

DataPosition read_data_position(const Metadata& md, const DataMixture& data, bool data_changed,
                                const std::string& step_dir) {
  DataPosition position;
  position.cursor = data.start();
  position.cursor.next = md.data_cursor;
  const auto saved = md.strings.find(kMixtureKey);
  // Before mixtures (or imported weights): one source gave every sample.
  std::vector<int64_t> taken = {md.data_cursor};
  std::string saved_signature = "one source";
  if (saved != md.strings.end()) {
    saved_signature = saved->second;
    taken.clear();
    for (size_t s = 0;; ++s) {
      const auto count = md.ints.find(kTakenPrefix + std::to_string(s));
      if (count == md.ints.end()) break;
      taken.push_back(count->second);
    }
  }
  const bool same = saved == md.strings.end() ? data.source_count() == 1 : saved->second == data.signature();
  if (same && taken.size() == position.cursor.taken.size()) {
    position.cursor.taken = taken;
    return position;
  }
  if (!data_changed)
    throw DataError(step_dir + " was trained on other data (" + saved_signature + ") than the job's (" +
                    data.signature() +
                    "): a resume would not read the samples the run would have. Resume with the same [data], "
                    "or pass --data-changed to continue on the new data from the saved counts");
  for (size_t s = 0; s < std::min(taken.size(), position.cursor.taken.size()); ++s) position.cursor.taken[s] = taken[s];
  position.changed = "the data changed (--data-changed): the checkpoint's was " + saved_signature + ", the job's is " +
                     data.signature() + "; continuing at global sample " + std::to_string(md.data_cursor) +
                     " with each source's saved count where it had one, from 0 where not";
  return position;
}

}  // namespace axonn
