#pragma once
// Reshard math, pure: which stored rectangles a requested rectangle reads from, and the
// strided copies that assemble it. Used by the reader, the read planner and the tests.
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "checkpoint/rect.hpp"

namespace axonn {

// Copy the part `region` (global coordinates) of stored rectangle `source` (an index into
// the sources passed to plan_copy) into the requested rectangle.
struct CopyOp {
  size_t source = 0;
  Rect region;  // = sources[source] ∩ wanted
};

// The copies that fill `wanted` from `sources`, in source order. Every element of `wanted`
// is covered exactly once, or this throws std::invalid_argument saying how much is
// uncovered or which two sources overlap.
std::vector<CopyOp> plan_copy(const std::vector<Rect>& sources, const Rect& wanted);

// Two rectangles that overlap (indices, lower first), or nullopt. Sort-and-sweep along
// dimension 0, so a grid of R x C tiles costs about R*C*C comparisons, not (R*C)^2.
std::optional<std::pair<size_t, size_t>> find_overlap(const std::vector<Rect>& rects);

// Copy `region` from `src` (row-major over src_rect.count) into `dst` (row-major over
// dst_rect.count). region must lie inside both rectangles. Contiguous innermost runs are
// single memcpy calls.
void copy_region(const float* src, const Rect& src_rect, float* dst, const Rect& dst_rect, const Rect& region);

// Elements in one row (dimension 0 index) of a rectangle: product of count[1:].
int64_t row_elements(const Rect& rect);

}  // namespace axonn
