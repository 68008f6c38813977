#pragma once
// The "export" tool: one safetensors file with every full tensor. Format: 8-byte
// little-endian header length N, N bytes of JSON {"__metadata__": {...}, "<name>":
// {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...} padded with spaces
// to a multiple of 8, then the raw little-endian data, tensors in name order, contiguous.
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/reader.hpp"

namespace axonn {

// Writes `out` (through a ".partial" file renamed at the end). Tensors are read through
// `options` (verified shard reads by default) in row groups of about 64 MiB, so memory
// stays bounded. __metadata__ holds axonn.step, axonn.layout and axonn.data_cursor.
// `only`: the tensors to export (any order; the file keeps name order), e.g. the parameters
// without their optimizer state; empty: every tensor. RequestMismatch for a name the
// checkpoint does not hold, before anything is written.
void export_safetensors(CheckpointReader& reader, const std::filesystem::path& out, const ReadOptions& options = {},
                        const std::vector<std::string>& only = {});

}  // namespace axonn
