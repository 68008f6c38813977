#pragma once
// A rectangle (hyperslab) of a global tensor, and the slices of tensors a rank holds.
// Every tensor is float32, row-major; a slice buffer is row-major over rect.count.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace axonn {

struct Rect {
  std::vector<int64_t> offset;  // first element, per dimension
  std::vector<int64_t> count;   // extent, per dimension (every count > 0)
  bool operator==(const Rect&) const = default;
};

// The whole tensor as one rectangle.
Rect full_rect(const std::vector<int64_t>& global_shape);
// Product of counts.
int64_t element_count(const Rect& rect);
int64_t element_count(const std::vector<int64_t>& shape);
// The overlap of two rectangles of the same rank, or nullopt when they do not overlap.
std::optional<Rect> intersect(const Rect& a, const Rect& b);
bool contains(const Rect& outer, const Rect& inner);
// Elements [begin, end) of `rect` in its row-major order as rectangles of the same tensor,
// in that order, each of whose elements are consecutive in it (so a row-major buffer of
// `rect` holds each one at `begin` elements in, contiguous). At most 2(rank - 1) + 1 of them:
// a partial row, whole rows, a partial row, recursively. Empty when begin >= end; throws
// std::invalid_argument when the range is outside [0, element_count(rect)].
struct FlatRect {
  Rect rect;
  int64_t begin = 0;  // its first element's position in `rect`'s row-major order
};
std::vector<FlatRect> flat_range_rects(const Rect& rect, int64_t begin, int64_t end);
// Throws std::invalid_argument unless rect lies inside global_shape with positive counts
// and matching rank; `what` names the tensor in the message.
void validate_rect(const std::vector<int64_t>& global_shape, const Rect& rect, const std::string& what);
// "[2, 3]" and "offset [0, 4] count [2, 4]", for messages.
std::string shape_string(const std::vector<int64_t>& shape);
std::string rect_string(const Rect& rect);

// A slice a rank writes: `data` points at element_count(rect) floats, row-major over
// rect.count, and must stay valid until the write call returns (AsyncSaver copies it).
struct TensorSlice {
  std::string name;
  std::vector<int64_t> global_shape;
  Rect rect;
  const float* data = nullptr;
};

// A slice a rank reads: the checkpoint's tensor `name` must have exactly `global_shape`;
// `data` receives element_count(rect) floats, row-major over rect.count.
struct SliceRead {
  std::string name;
  std::vector<int64_t> global_shape;
  Rect rect;
  float* data = nullptr;
};

// Tensor names become HDF5 paths in index.h5: letters, digits and "_.-", with "/" only
// between non-empty components ("blocks/0/attn.qkv"). Throws std::invalid_argument.
void validate_tensor_name(const std::string& name);

}  // namespace axonn
