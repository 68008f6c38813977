#include "checkpoint/read_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "checkpoint/reshard.hpp"

namespace axonn {
namespace {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::vector<Rect> source_rects(const TensorInfo& info) {
  std::vector<Rect> rects;
  rects.reserve(info.sources.size());
  for (const StoredRect& s : info.sources) rects.push_back(s.rect);
  return rects;
}

}  // namespace

int64_t source_bytes_read(const StoredRect& source, const Rect& region, bool verified) {
  if (!verified) return element_count(region) * 4;
  const BlockGrid grid = source.blocks();
  return span_elements(grid, blocks_touched(grid, source.rect, region)) * 4;
}

ReadPlan plan_reads(const std::vector<TensorInfo>& table, const std::vector<std::vector<RectRequest>>& per_rank,
                    bool verified) {
  ReadPlan plan;
  for (const TensorInfo& t : table) plan.bytes_stored += t.bytes();
  for (size_t r = 0; r < per_rank.size(); ++r) {
    RankReadPlan rank_plan;
    std::set<std::string> files;
    for (const RectRequest& req : per_rank[r]) {
      const TensorInfo& info = find_tensor(table, req.tensor, "the plan's checkpoint");
      check_request(info, info.global_shape, req.rect, "the plan's checkpoint");
      rank_plan.bytes_wanted += element_count(req.rect) * 4;
      for (const CopyOp& op : plan_copy(source_rects(info), req.rect)) {
        const StoredRect& src = info.sources[op.source];
        files.insert(src.file);
        rank_plan.bytes_read += source_bytes_read(src, op.region, verified);
      }
    }
    rank_plan.files.assign(files.begin(), files.end());
    plan.bytes_wanted += rank_plan.bytes_wanted;
    plan.bytes_read += rank_plan.bytes_read;
    plan.ranks.push_back(std::move(rank_plan));
  }
  return plan;
}

std::string format_read_plan(const ReadPlan& plan) {
  std::string out;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankReadPlan& rp = plan.ranks[r];
    out += "rank " + std::to_string(r) + ": " + std::to_string(rp.files.size()) + " files (";
    for (size_t i = 0; i < rp.files.size(); ++i) out += (i ? ", " : "") + rp.files[i];
    out += "), reads " + mib(rp.bytes_read) + " for " + mib(rp.bytes_wanted) + " wanted\n";
  }
  char ratio[32];
  std::snprintf(
      ratio, sizeof ratio, "%.2fx",
      plan.bytes_wanted ? static_cast<double>(plan.bytes_read) / static_cast<double>(plan.bytes_wanted) : 0.0);
  out += "total: reads " + mib(plan.bytes_read) + " for " + mib(plan.bytes_wanted) + " wanted (" + ratio +
         "), checkpoint stores " + mib(plan.bytes_stored) + "\n";
  return out;
}

}  // namespace axonn
