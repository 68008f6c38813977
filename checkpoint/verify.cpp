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

// Re-hashes one stored rectangle; returns the recomputed dataset hash.
uint64_t verify_source(h5::Id file, const std::string& f, const Source& src, VerifyReport& report,
                       std::vector<float>& buf) {
  const StoredRect& s = *src.rect;
  h5::Handle ds = h5::open_dataset(file, s.dataset, f);
  const int64_t row_elems = row_elements(s.rect);
  const int64_t rows = s.rect.count[0];
  const int64_t group_rows = std::max<int64_t>(1, kGroupBytes / (row_elems * 4) / s.rows_per_block) * s.rows_per_block;
  std::vector<uint64_t> computed;
  std::string bad_rows;
  int bad_blocks = 0;
  for (int64_t g = 0; g < rows; g += group_rows) {
    const int64_t n = std::min(group_rows, rows - g);
    Rect local{std::vector<int64_t>(s.rect.count.size(), 0), s.rect.count};
    local.offset[0] = g;
    local.count[0] = n;
    buf.resize(static_cast<size_t>(n * row_elems));
    h5::read_f32(ds.get(), local, buf.data(), local.count, std::vector<int64_t>(local.count.size(), 0), f);
    report.bytes_checked += n * row_elems * 4;
    for (int64_t r = 0; r < n; r += s.rows_per_block) {
      const int64_t m = std::min(s.rows_per_block, n - r);
      const uint64_t h = xxh3_64(buf.data() + r * row_elems, static_cast<size_t>(m * row_elems * 4));
      const size_t b = computed.size();
      computed.push_back(h);
      if (b >= s.block_hashes.size() || s.block_hashes[b] != h) {
        if (bad_blocks++ < 4)
          bad_rows += (bad_rows.empty() ? "" : ", ") + std::to_string(g + r) + ".." + std::to_string(g + r + m - 1);
      }
    }
  }
  if (bad_blocks > 0) {
    report.problems.push_back(
        VerifyProblem{f, src.tensor->name,
                      "checksum mismatch in " + s.dataset + " (" + rect_string(s.rect) +
                          "): " + std::to_string(bad_blocks) + " of " + std::to_string(computed.size()) +
                          " blocks differ from the index, rows " + bad_rows + (bad_blocks > 4 ? ", ..." : "")});
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
