#include "checkpoint/safetensors.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <utility>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/safetensors_writer.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

constexpr int64_t kGroupBytes = int64_t{64} << 20;

// A RequestMismatch naming the entry, thrown before anything is written.
[[noreturn]] void bad_entry(const CheckpointReader& reader, const ExportTensor& entry, const std::string& why) {
  std::string message = "export entry '";
  message.append(entry.name).append("' (from ").append(entry.source).append("): ").append(why);
  throw RequestMismatch((reader.step_dir() / "index.h5").string(), "export", message);
}

// Messages built by appending: GCC 12 at -O3 warns falsely (-Wrestrict) on longer
// "literal" + std::string chains.
std::string words(std::initializer_list<std::string> parts) {
  std::string s;
  for (const std::string& p : parts) s.append(p);
  return s;
}

void validate_entry(const CheckpointReader& reader, const ExportTensor& entry) {
  if (entry.name.empty()) bad_entry(reader, entry, "the file name is empty");
  const TensorInfo& t = reader.tensor(entry.source);  // RequestMismatch when absent
  try {
    validate_rect(t.global_shape, entry.slab, entry.source);
  } catch (const std::invalid_argument& e) {
    bad_entry(reader, entry, words({"slab: ", e.what()}));
  }
  const auto rank = static_cast<int64_t>(entry.slab.count.size());
  if (entry.drop_leading < 0 || entry.drop_leading > rank)
    bad_entry(reader, entry,
              words({"drop_leading ", std::to_string(entry.drop_leading), " is outside [0, ", std::to_string(rank),
                     "], the slab's rank"}));
  for (size_t d = 0; d < static_cast<size_t>(entry.drop_leading); ++d)
    if (entry.slab.count[d] != 1)
      bad_entry(reader, entry,
                words({"dropped dimension ", std::to_string(d), " of slab ", rect_string(entry.slab), " has extent ",
                       std::to_string(entry.slab.count[d]), ", not 1"}));
  if (!entry.transpose) return;
  if (rank - entry.drop_leading < 2)
    bad_entry(reader, entry,
              words({"a transpose needs 2 dimensions left after dropping; slab ", rect_string(entry.slab),
                     ", drop_leading ", std::to_string(entry.drop_leading)}));
  int64_t wide = 0;  // extents above 1
  for (int64_t extent : entry.slab.count) wide += extent > 1 ? 1 : 0;
  if (wide > 2)
    bad_entry(reader, entry,
              words({"a transposed slab must be one matrix (at most two extents above 1), got ",
                     rect_string(entry.slab)}));
}

// A transposed entry's matrix [rows, cols]: the slab's extents after the dropped ones, with
// extents of 1 removed (the first first) until two remain, so [1, C, 1, F] is [C, F], as its
// row-major elements lie. Assumes a validated entry.
std::array<int64_t, 2> matrix_of(const ExportTensor& entry) {
  const std::vector<int64_t>& count = entry.slab.count;
  const auto first = static_cast<size_t>(entry.drop_leading);
  size_t surplus = count.size() - first - 2;  // extents of 1 to drop
  std::array<int64_t, 2> matrix{1, 1};
  size_t kept = 0;
  for (size_t d = first; d < count.size() && kept < 2; ++d) {
    if (count[d] == 1 && surplus > 0) {
      --surplus;
      continue;
    }
    matrix[kept++] = count[d];
  }
  return matrix;
}

}  // namespace

ExportTensor whole_tensor(const TensorInfo& t) {
  return ExportTensor{t.name, t.name, full_rect(t.global_shape), 0, false};
}

std::vector<int64_t> export_shape(const ExportTensor& entry) {
  if (entry.transpose) {
    const std::array<int64_t, 2> matrix = matrix_of(entry);
    return {matrix[1], matrix[0]};
  }
  return std::vector<int64_t>(entry.slab.count.begin() + entry.drop_leading, entry.slab.count.end());
}

void export_safetensors(CheckpointReader& reader, const fs::path& out, const std::vector<ExportTensor>& unsorted,
                        const ReadOptions& options) {
  std::vector<const ExportTensor*> entries;
  for (const ExportTensor& e : unsorted) {
    validate_entry(reader, e);
    entries.push_back(&e);
  }
  std::sort(entries.begin(), entries.end(),
            [](const ExportTensor* a, const ExportTensor* b) { return a->name < b->name; });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i]->name == entries[i - 1]->name)
      bad_entry(reader, *entries[i], words({"the file name is also given to a slab of ", entries[i - 1]->source}));

  const Metadata& m = reader.metadata();
  std::vector<SafetensorsEntry> layout;
  for (const ExportTensor* e : entries) layout.push_back({e->name, export_shape(*e)});
  SafetensorsWriter file(out, std::move(layout),
                         {{"axonn.step", std::to_string(reader.step())},
                          {"axonn.layout", m.layout},
                          {"axonn.data_cursor", std::to_string(m.data_cursor)}});
  {
    // A read that fails (a checksum mismatch, a missing shard) leaves no file: the writer
    // removes its partial file when it is destroyed unfinished.
    auto read = [&](const std::string& source, const Rect& rect, float* dst) { reader.read(source, rect, dst, options); };
    auto write = [&](const float* data, size_t n) { file.append(data, static_cast<int64_t>(n)); };
    std::vector<float> buf;
    std::vector<float> staged;
    for (const ExportTensor* e : entries) {
      const Rect& slab = e->slab;
      if (e->transpose) {
        // The slab is one matrix [r, c] (matrix_of); the file wants [c, r]: row j of the
        // output is column j of the slab, staged about 64 MiB of output rows at a time.
        const auto [r, c] = matrix_of(*e);
        buf.resize(static_cast<size_t>(r * c));
        read(e->source, slab, buf.data());
        const int64_t group = std::max<int64_t>(1, kGroupBytes / (r * 4));
        for (int64_t j0 = 0; j0 < c; j0 += group) {
          const int64_t rows = std::min(group, c - j0);
          staged.resize(static_cast<size_t>(rows * r));
          for (int64_t j = 0; j < rows; ++j)
            for (int64_t i = 0; i < r; ++i)
              staged[static_cast<size_t>(j * r + i)] = buf[static_cast<size_t>(i * c + j0 + j)];
          write(staged.data(), staged.size());
        }
        continue;
      }
      // Row groups of about 64 MiB along the slab's first dimension of extent > 1 (the ones
      // before it are 1): such groups are contiguous in the slab's row-major order.
      size_t d = 0;
      while (d + 1 < slab.count.size() && slab.count[d] == 1) ++d;
      int64_t row_elems = 1;
      for (size_t k = d + 1; k < slab.count.size(); ++k) row_elems *= slab.count[k];
      const int64_t group = std::max<int64_t>(1, kGroupBytes / (row_elems * 4));
      for (int64_t i = 0; i < slab.count[d]; i += group) {
        Rect rows = slab;
        rows.offset[d] = slab.offset[d] + i;
        rows.count[d] = std::min(group, slab.count[d] - i);
        buf.resize(static_cast<size_t>(element_count(rows)));
        read(e->source, rows, buf.data());
        write(buf.data(), buf.size());
      }
    }
  }
  file.finish();
}

void export_safetensors(CheckpointReader& reader, const fs::path& out, const ReadOptions& options,
                        const std::vector<std::string>& only) {
  std::vector<ExportTensor> entries;
  if (only.empty()) {
    for (const TensorInfo& t : reader.tensors()) entries.push_back(whole_tensor(t));
  } else {
    std::vector<std::string> names = only;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());  // a name listed twice
    for (const std::string& name : names) entries.push_back(whole_tensor(reader.tensor(name)));
  }
  export_safetensors(reader, out, entries, options);
}

}  // namespace axonn
