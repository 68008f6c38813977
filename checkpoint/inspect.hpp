#pragma once
// The "inspect" tool: a human-readable summary of a committed step (the structured data is
// CheckpointReader's tensors(), shards() and metadata()).
#include <string>

#include "checkpoint/reader.hpp"

namespace axonn {

// Step, format, layout, data cursor, metadata keys, then one line per tensor (name, global
// shape, dtype, size, rectangles) and one per shard (file, rank, datasets, payload and file
// sizes, XXH3-64).
std::string inspect_checkpoint(const CheckpointReader& reader);

}  // namespace axonn
