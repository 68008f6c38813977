#pragma once
// Replica spreading, pure: data-parallel replicas hold identical rectangles; each distinct
// rectangle must be written exactly once, and the writing spread so that every rank writes
// about the same number of bytes. Every rank computes the same answer from the same input.
#include <cstddef>
#include <string>
#include <vector>

#include "checkpoint/rect.hpp"

namespace axonn {

struct HeldSlice {
  std::string name;
  std::vector<int64_t> global_shape;
  Rect rect;
};

// held[r]: the slices rank r holds. Returns writes[r]: indices into held[r] that rank r
// writes. Each distinct (name, rect) goes to exactly one of its holders: largest first,
// each to the holder with the fewest bytes assigned so far (ties: lowest rank), so within
// a replica group the bytes differ by at most one rectangle. Throws std::invalid_argument
// when one name has two global shapes or a rank lists the same rectangle twice.
std::vector<std::vector<size_t>> assign_writers(const std::vector<std::vector<HeldSlice>>& held);

}  // namespace axonn
