#pragma once
// The "export" tool: one safetensors file of full tensors, or of pieces of them under other
// names. Format: 8-byte little-endian header length N, N bytes of JSON {"__metadata__": {...},
// "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...} padded with
// spaces to a multiple of 8, then the raw little-endian data, tensors in name order, contiguous.
// The checkpoint library knows no model: a caller that wants another program's tensor names
// (runner/ckpt/export_names.hpp) builds the entries.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/reader.hpp"

namespace axonn {

// One tensor of the file: `name` holds the rectangle `slab` of checkpoint tensor `source`.
// Its shape in the file is slab.count without its first `drop_leading` extents (each must be
// 1), so one expert's slab [1, C, 4C] of an [E, C, 4C] tensor is a [C, 4C] tensor with
// drop_leading = 1. With `transpose` the file holds the matrix transposed: the slab is one
// matrix (at most two extents above 1; its extents of 1 are dropped), and the file holds
// [cols, rows]: [1, C, 4C] -> [4C, C], and SwiGLU's gate slab [1, C, 1, F] of an expert's
// [E, C, 2, F] -> [F, C]. A transposed slab is read whole, so memory holds one slab
// plus a 64 MiB staging buffer; any other entry streams in row groups of about 64 MiB.
struct ExportTensor {
  std::string name;
  std::string source;
  Rect slab;
  int drop_leading = 0;
  bool transpose = false;
};

// The entry that exports checkpoint tensor `t` whole under its own name.
ExportTensor whole_tensor(const TensorInfo& t);
// The entry's shape in the file (see ExportTensor); assumes a validated entry.
std::vector<int64_t> export_shape(const ExportTensor& entry);

// Writes `entries` to `out` (through a ".partial" file renamed at the end), sorted by file
// name. Tensors are read through `options` (verified shard reads by default). Every entry is
// checked before anything is written; RequestMismatch names the first bad one: an empty or
// repeated file name, a source the checkpoint does not hold, a slab outside it (or of another
// rank), a dropped extent that is not 1, a transpose of fewer than 2 dimensions or of a slab
// that is not one matrix. __metadata__ holds axonn.step, axonn.layout and axonn.data_cursor.
void export_safetensors(CheckpointReader& reader, const std::filesystem::path& out,
                        const std::vector<ExportTensor>& entries, const ReadOptions& options = {});

// Every tensor under its own name, or only those in `only` (any order; a name listed twice is
// written once), e.g. the parameters without their optimizer state. RequestMismatch for a
// name the checkpoint does not hold, before anything is written.
void export_safetensors(CheckpointReader& reader, const std::filesystem::path& out, const ReadOptions& options = {},
                        const std::vector<std::string>& only = {});

}  // namespace axonn
