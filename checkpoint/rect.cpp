#include "checkpoint/rect.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace axonn {

Rect full_rect(const std::vector<int64_t>& global_shape) {
  return Rect{std::vector<int64_t>(global_shape.size(), 0), global_shape};
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t c : shape) n *= c;
  return n;
}

int64_t element_count(const Rect& rect) { return element_count(rect.count); }

std::optional<Rect> intersect(const Rect& a, const Rect& b) {
  if (a.offset.size() != b.offset.size()) return std::nullopt;
  Rect r{std::vector<int64_t>(a.offset.size()), std::vector<int64_t>(a.offset.size())};
  for (size_t d = 0; d < a.offset.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.count[d], b.offset[d] + b.count[d]);
    if (hi <= lo) return std::nullopt;
    r.offset[d] = lo;
    r.count[d] = hi - lo;
  }
  return r;
}

namespace {

// Elements [a, b) of the sub-box of `rect` whose dimensions before d are fixed at `at`
// (offsets relative to rect) and from d on are whole; `base` is the sub-box's first element.
void flat_range(const Rect& rect, std::vector<int64_t>& at, size_t d, int64_t a, int64_t b, int64_t base,
                std::vector<FlatRect>& out) {
  int64_t row = 1;  // elements per index of dimension d
  for (size_t k = d + 1; k < rect.count.size(); ++k) row *= rect.count[k];
  auto whole = [&](int64_t first, int64_t last) {  // indices [first, last) of dimension d, the rest whole
    FlatRect f;
    f.begin = base + first * row;
    for (size_t k = 0; k < rect.count.size(); ++k) {
      f.rect.offset.push_back(rect.offset[k] + (k < d ? at[k] : k == d ? first : 0));
      f.rect.count.push_back(k < d ? 1 : k == d ? last - first : rect.count[k]);
    }
    out.push_back(std::move(f));
  };
  auto part = [&](int64_t index, int64_t from, int64_t to) {  // within index `index` of dimension d
    at[d] = index;
    flat_range(rect, at, d + 1, from, to, base + index * row, out);
  };
  int64_t first = a / row;
  const int64_t last = b / row;
  if (first == last) return part(first, a - first * row, b - first * row);
  if (a % row != 0) part(first++, a % row, row);
  if (first < last) whole(first, last);
  if (b % row != 0) part(last, 0, b % row);
}

}  // namespace

std::vector<FlatRect> flat_range_rects(const Rect& rect, int64_t begin, int64_t end) {
  const int64_t n = element_count(rect);
  if (begin < 0 || end > n)
    throw std::invalid_argument("flat_range_rects: elements [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") are outside " + rect_string(rect) + " (" + std::to_string(n) + " elements)");
  std::vector<FlatRect> out;
  if (begin >= end || rect.count.empty()) return out;
  std::vector<int64_t> at(rect.count.size(), 0);
  flat_range(rect, at, 0, begin, end, 0, out);
  return out;
}

bool contains(const Rect& outer, const Rect& inner) {
  if (outer.offset.size() != inner.offset.size()) return false;
  for (size_t d = 0; d < outer.offset.size(); ++d) {
    if (inner.offset[d] < outer.offset[d]) return false;
    if (inner.offset[d] + inner.count[d] > outer.offset[d] + outer.count[d]) return false;
  }
  return true;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

std::string rect_string(const Rect& rect) {
  return "offset " + shape_string(rect.offset) + " count " + shape_string(rect.count);
}

void validate_rect(const std::vector<int64_t>& global_shape, const Rect& rect, const std::string& what) {
  if (global_shape.empty()) {
    throw std::invalid_argument(what + ": global shape is empty; store a scalar as shape [1]");
  }
  for (int64_t s : global_shape) {
    if (s <= 0)
      throw std::invalid_argument(what + ": global shape " + shape_string(global_shape) + " has a non-positive extent");
  }
  if (rect.offset.size() != global_shape.size() || rect.count.size() != global_shape.size()) {
    throw std::invalid_argument(what + ": rectangle " + rect_string(rect) + " does not have the rank of global shape " +
                                shape_string(global_shape));
  }
  for (size_t d = 0; d < global_shape.size(); ++d) {
    // offset + count > extent, without forming offset + count (an index may hold any int64_t).
    if (rect.count[d] <= 0 || rect.offset[d] < 0 || rect.count[d] > global_shape[d] - rect.offset[d]) {
      throw std::invalid_argument(what + ": rectangle " + rect_string(rect) + " does not lie inside global shape " +
                                  shape_string(global_shape) + " with positive counts");
    }
  }
}

void validate_tensor_name(const std::string& name) {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("tensor name '" + name + "' " + why +
                                "; use letters, digits and \"_.-\", with \"/\" between non-empty components");
  };
  if (name.empty()) bad("is empty");
  if (name.front() == '/' || name.back() == '/') bad("starts or ends with '/'");
  if (name.find("//") != std::string::npos) bad("has an empty component");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-' || c == '/';
    if (!ok) bad("has the character '" + std::string(1, c) + "'");
  }
  std::istringstream parts(name);
  for (std::string part; std::getline(parts, part, '/');) {
    if (part == "." || part == "..") bad("has a '.' or '..' component");
  }
}

}  // namespace axonn
