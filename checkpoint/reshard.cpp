#include "checkpoint/reshard.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace axonn {

std::vector<CopyOp> plan_copy(const std::vector<Rect>& sources, const Rect& wanted) {
  std::vector<CopyOp> ops;
  std::vector<Rect> regions;
  int64_t covered = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (auto region = intersect(sources[i], wanted)) {
      covered += element_count(*region);
      regions.push_back(*region);
      ops.push_back(CopyOp{i, std::move(*region)});
    }
  }
  if (auto pair = find_overlap(regions)) {
    throw std::invalid_argument("stored rectangles " + rect_string(sources[ops[pair->first].source]) + " and " +
                                rect_string(sources[ops[pair->second].source]) + " overlap inside the requested " +
                                rect_string(wanted));
  }
  // Disjoint regions inside `wanted` whose volumes add up to it cover it exactly.
  if (covered != element_count(wanted)) {
    throw std::invalid_argument("stored rectangles cover " + std::to_string(covered) + " of the " +
                                std::to_string(element_count(wanted)) + " elements of the requested " +
                                rect_string(wanted));
  }
  return ops;
}

std::optional<std::pair<size_t, size_t>> find_overlap(const std::vector<Rect>& rects) {
  std::vector<size_t> order(rects.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (rects[a].offset.empty() || rects[b].offset.empty()) return a < b;
    return rects[a].offset[0] != rects[b].offset[0] ? rects[a].offset[0] < rects[b].offset[0] : a < b;
  });
  for (size_t i = 0; i < order.size(); ++i) {
    const Rect& a = rects[order[i]];
    const int64_t a_end = a.offset.empty() ? 0 : a.offset[0] + a.count[0];
    for (size_t j = i + 1; j < order.size(); ++j) {
      const Rect& b = rects[order[j]];
      if (!a.offset.empty() && !b.offset.empty() && b.offset[0] >= a_end) break;  // sorted: no later one overlaps
      if (intersect(a, b)) return std::make_pair(std::min(order[i], order[j]), std::max(order[i], order[j]));
    }
  }
  return std::nullopt;
}

void copy_region(const float* src, const Rect& src_rect, float* dst, const Rect& dst_rect, const Rect& region) {
  const size_t rank = region.count.size();
  if (!contains(src_rect, region) || !contains(dst_rect, region)) {
    throw std::invalid_argument("copy_region: region " + rect_string(region) + " is not inside source " +
                                rect_string(src_rect) + " and destination " + rect_string(dst_rect));
  }
  // Row-major strides (elements) of both buffers.
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    src_stride[d - 1] = src_stride[d] * src_rect.count[d];
    dst_stride[d - 1] = dst_stride[d] * dst_rect.count[d];
  }
  // Merge trailing dimensions that are whole in source, destination and region into one
  // contiguous run, so same-layout copies become one memcpy.
  size_t inner = rank - 1;
  int64_t run = region.count[inner];
  while (inner > 0 && region.count[inner] == src_rect.count[inner] && region.count[inner] == dst_rect.count[inner]) {
    --inner;
    run *= region.count[inner];
  }
  int64_t src_base = 0, dst_base = 0;
  for (size_t d = 0; d < rank; ++d) {
    src_base += (region.offset[d] - src_rect.offset[d]) * src_stride[d];
    dst_base += (region.offset[d] - dst_rect.offset[d]) * dst_stride[d];
  }
  // Odometer over dimensions [0, inner), each step one memcpy of `run` floats.
  std::vector<int64_t> index(inner, 0);
  const size_t run_bytes = static_cast<size_t>(run) * sizeof(float);
  while (true) {
    int64_t s = src_base, t = dst_base;
    for (size_t d = 0; d < inner; ++d) {
      s += index[d] * src_stride[d];
      t += index[d] * dst_stride[d];
    }
    std::memcpy(dst + t, src + s, run_bytes);
    size_t d = inner;
    while (d > 0) {
      --d;
      if (++index[d] < region.count[d]) break;
      index[d] = 0;
      if (d == 0) return;
    }
    if (inner == 0) return;
  }
}

int64_t row_elements(const Rect& rect) {
  int64_t n = 1;
  for (size_t d = 1; d < rect.count.size(); ++d) n *= rect.count[d];
  return n;
}

}  // namespace axonn
