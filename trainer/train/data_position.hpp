#pragma once
// Where the data stands in a checkpoint, and how a resume continues it.
//
// A step's metadata (checkpoint/metadata.hpp) holds the next global sample (data_cursor),
// the samples taken from each source (ints "data.taken.<s>") and the mixture they were taken
// from (strings "data.mixture", DataMixture::signature()). A resume with the same mixture
// continues the schedule exactly (at any layout); one with another mixture is refused unless
// the user says the data changed on purpose (`axonn train --data-changed`).
#include <string>

#include "checkpoint/metadata.hpp"
#include "trainer/data/data_mixture.hpp"

namespace axonn {

void write_data_position(Metadata& md, const DataMixture& data, const MixtureCursor& cursor);

struct DataPosition {
  MixtureCursor cursor;
  // Empty, or what changed and how the run goes on (the caller logs it as a warning).
  std::string changed;
};

// The cursor a resume of `data` continues from. A step without "data.mixture" (written before
// mixtures, or by `axonn ckpt import-hf`) reads as one source that gave every sample. Throws
// DataError naming both mixtures and --data-changed when they differ and !data_changed.
// With data_changed: a source keeps the count saved at its position (past its samples, its
// order goes on into the next epoch), a new one starts at 0, and the global cursor goes on.
DataPosition read_data_position(const Metadata& md, const DataMixture& data, bool data_changed,
                                const std::string& step_dir);

}  // namespace axonn
