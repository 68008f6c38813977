#include "checkpoint/verify.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/hdf5_util.hpp"
#include "checkpoint/index_file.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/shard_meta.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

constexpr int64_t kGroupBytes = int64_t{64} << 20;

struct Source {
  const TensorInfo* tensor;
  const StoredRect* rect;
};

// Re-hashes one stored rectangle in groups of whole block rows; returns the recomputed
// dataset hash.
uint64_t verify_source(h5::Id file, const std::string& f, const Source& src, VerifyReport& report,
                       std::vector<float>& buf) {
  const StoredRect& s = *src.rect;
  h5::Handle ds = h5::open_dataset(file, s.dataset, f);
  const BlockGrid grid = s.blocks();
  const int64_t row_elems = grid.row_elements();
  const int64_t group_block_rows = std::max<int64_t>(1, kGroupBytes / (row_elems * 4 * grid.rows_per_block));
  std::vector<uint64_t> computed;
  std::string bad_blocks_text;
  int bad_blocks = 0;
  for (int64_t i0 = 0; i0 < grid.block_rows(); i0 += group_block_rows) {
    const int64_t i1 = std::min(grid.block_rows(), i0 + group_block_rows);
    Rect local{std::vector<int64_t>(s.rect.count.size(), 0), s.rect.count};
    local.offset[0] = grid.row_begin(i0);
    local.count[0] = grid.row_end(i1 - 1) - local.offset[0];
    buf.resize(static_cast<size_t>(element_count(local)));
    h5::read_f32(ds.get(), local, buf.data(), local.count, std::vector<int64_t>(local.count.size(), 0), f);
    report.bytes_checked += element_count(local) * 4;
    for (int64_t i = i0; i < i1; ++i) {
      const std::vector<uint64_t> band =
          band_hashes(buf.data() + (grid.row_begin(i) - local.offset[0]) * row_elems,
                      grid.row_end(i) - grid.row_begin(i), row_elems, row_elems, grid.cols_per_block * grid.inner);
      for (size_t j = 0; j < band.size(); ++j) {
        const size_t b = computed.size();
        computed.push_back(band[j]);
        if (b < s.block_hashes.size() && s.block_hashes[b] == band[j]) continue;
        if (bad_blocks++ < 4) {
          const int64_t jj = static_cast<int64_t>(j);
          bad_blocks_text += (bad_blocks_text.empty() ? "" : "; ") + std::string("rows ") +
                             std::to_string(grid.row_begin(i)) + ".." + std::to_string(grid.row_end(i) - 1) +
                             (s.rect.count.size() > 1 ? " columns " + std::to_string(grid.col_begin(jj)) + ".." +
                                                            std::to_string(grid.col_end(jj) - 1)
                                                      : "");
        }
      }
    }
  }
  if (bad_blocks > 0) {
    report.problems.push_back(VerifyProblem{f, src.tensor->name,
                                            "checksum mismatch in " + s.dataset + " (" + rect_string(s.rect) +
                                                "): " + std::to_string(bad_blocks) + " of " +
                                                std::to_string(computed.size()) + " blocks differ from the index, " +
                                                bad_blocks_text + (bad_blocks > 4 ? "; ..." : "")});
  }
  return combine_hashes(computed);
}

}  // namespace

VerifyReport verify_checkpoint(const fs::path& step_dir) {
  VerifyReport report;
  report.step_dir = step_dir;
  const IndexContents index = read_index(step_dir / kIndexFileName);
  report.step = index.step;
  std::map<int, std::vector<Source>> by_rank;
  for (const TensorInfo& t : index.tensors) {
    for (const StoredRect& s : t.sources) by_rank[s.rank].push_back(Source{&t, &s});
  }
  std::vector<float> buf;
  for (const ShardInfo& shard : index.shards) {
    const fs::path path = step_dir / shard.file;
    const std::string f = path.string();
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      report.problems.push_back(VerifyProblem{f, "", "shard file is missing"});
      continue;
    }
    ++report.shards_checked;
    try {
      const ShardMeta meta = read_shard_meta(path);
      if (meta.checksum != shard.checksum) {
        report.problems.push_back(VerifyProblem{
            f, "",
            "shard checksum attribute " + hex64(meta.checksum) + " differs from the index's " + hex64(shard.checksum)});
      }
      h5::Handle file = h5::open_file_readonly(path);
      std::vector<uint64_t> dataset_hashes;
      // The shard hash combines dataset hashes in dataset order ("/slice-00000", ...).
      std::vector<Source> sources = by_rank[shard.rank];
      std::sort(sources.begin(), sources.end(),
                [](const Source& a, const Source& b) { return a.rect->dataset < b.rect->dataset; });
      for (const Source& src : sources) dataset_hashes.push_back(verify_source(file.get(), f, src, report, buf));
      const uint64_t recomputed = combine_hashes(dataset_hashes);
      if (recomputed != shard.checksum) {
        report.problems.push_back(VerifyProblem{f, "",
                                                "shard checksum recomputed from the data is " + hex64(recomputed) +
                                                    ", the index records " + hex64(shard.checksum)});
      }
    } catch (const CheckpointError& e) {
      report.problems.push_back(VerifyProblem{f, "", e.what()});
    }
  }
  return report;
}

std::string format_verify_report(const VerifyReport& report) {
  char head[160];
  std::snprintf(head, sizeof head, "%s: step %lld, %d shards, %.1f MiB checked\n", report.ok() ? "OK" : "FAILED",
                static_cast<long long>(report.step), report.shards_checked,
                static_cast<double>(report.bytes_checked) / (1024.0 * 1024.0));
  std::string out = head;
  for (const VerifyProblem& p : report.problems) {
    out += "  " + p.file + (p.tensor.empty() ? "" : " [tensor '" + p.tensor + "']") + ": " + p.what + "\n";
  }
  return out;
}

}  // namespace axonn
