#include "layout/layout.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <utility>

namespace axonn {

char axis_letter(Axis axis) {
  if (axis == Axis::expert || axis == Axis::expert_data)
    throw LayoutError("axis " + axis_name(axis) + " is a cut of the data axis, not a grid axis with a letter");
  return "xyzd"[static_cast<int>(axis)];
}

std::string axis_name(Axis axis) { return comm_axis_name(comm_axis(axis)); }

std::string comm_axis_name(CommAxis axis) {
  static const char* const names[] = {"x", "y", "z", "data", "world", "expert", "expert_data"};
  return names[static_cast<int>(axis)];
}

namespace {

// The member of `s` (a Coords or a Layout: both have x, y, z and data) that axis `a` names.
template <class PerAxis>
const int& along(const PerAxis& s, Axis a) {
  switch (a) {
    case Axis::x:
      return s.x;
    case Axis::y:
      return s.y;
    case Axis::z:
      return s.z;
    case Axis::data:
      break;
    case Axis::expert:
    case Axis::expert_data:
      throw LayoutError("axis " + axis_name(a) + " is a cut of the data axis: use Layout::coordinate and Layout::size");
  }
  return s.data;
}

}  // namespace

const int& Coords::operator[](Axis a) const { return along(*this, a); }

int& Coords::operator[](Axis a) { return const_cast<int&>(std::as_const(*this)[a]); }

int Layout::size(Axis a) const {
  if (a == Axis::expert) return experts;
  if (a == Axis::expert_data) return data / experts;
  return along(*this, a);
}

int Layout::coordinate(const Coords& c, Axis a) const {
  if (a == Axis::expert) return c.data % experts;
  if (a == Axis::expert_data) return c.data / experts;
  return c[a];
}

int Layout::stride(Axis a) const {
  int s = 1;
  for (Axis o : order) {
    if (o == a) return s;
    s *= size(o);
  }
  throw LayoutError("axis order " + format_order(*this) + " does not contain axis " + axis_name(a));
}

Coords Layout::coords(int rank) const {
  if (rank < 0 || rank >= world())
    throw LayoutError("rank " + std::to_string(rank) + " is outside layout " + format_layout(*this) + " (world " +
                      std::to_string(world()) + ")");
  Coords c;
  for (Axis a : order) {
    c[a] = rank % size(a);
    rank /= size(a);
  }
  return c;
}

int Layout::rank(const Coords& c) const {
  int r = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (c[*it] < 0 || c[*it] >= size(*it))
      throw LayoutError("coordinate " + axis_name(*it) + "=" + std::to_string(c[*it]) + " is outside layout " +
                        format_layout(*this));
    r = r * size(*it) + c[*it];
  }
  return r;
}

std::vector<int> Layout::group(Axis a, int rank_in_group) const {
  Coords c = coords(rank_in_group);
  std::vector<int> members;
  for (int i = 0; i < size(a); ++i) {
    c[a] = i;
    members.push_back(rank(c));
  }
  return members;
}

std::vector<std::vector<int>> Layout::groups(Axis a) const {
  std::vector<std::vector<int>> all;
  for (int r = 0; r < world(); ++r)
    if (coords(r)[a] == 0) all.push_back(group(a, r));
  return all;
}

std::vector<int> Layout::comm_group(CommAxis a, int rank_in_group) const {
  switch (a) {
    case CommAxis::world: {
      std::vector<int> all(static_cast<size_t>(world()));
      for (int r = 0; r < world(); ++r) all[static_cast<size_t>(r)] = r;
      return all;
    }
    case CommAxis::expert:
    case CommAxis::expert_data: {
      // Data coordinate d = group·E_p + expert rank: the expert axis varies the expert rank,
      // expert_data the group.
      if (comm_size(a) == 1) return {rank_in_group};
      Coords c = coords(rank_in_group);
      const int first = a == CommAxis::expert ? c.data - c.data % experts : c.data % experts;
      const int step = a == CommAxis::expert ? 1 : experts;
      std::vector<int> members;
      for (int i = 0; i < comm_size(a); ++i) {
        c.data = first + i * step;
        members.push_back(rank(c));
      }
      return members;
    }
    default:
      return group(static_cast<Axis>(a), rank_in_group);
  }
}

int Layout::comm_size(CommAxis a) const {
  switch (a) {
    case CommAxis::world: return world();
    case CommAxis::expert: return experts;
    case CommAxis::expert_data: return experts == 1 ? 1 : data / experts;
    default: return size(static_cast<Axis>(a));
  }
}

int Layout::comm_stride(CommAxis a) const {
  switch (a) {
    case CommAxis::world: return 1;
    case CommAxis::expert: return stride(Axis::data);
    case CommAxis::expert_data: return stride(Axis::data) * experts;
    default: return stride(static_cast<Axis>(a));
  }
}

namespace {

int parse_size(const std::string& part, const std::string& text) {
  int v = 0;
  auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (part.empty() || ec != std::errc() || end != part.data() + part.size() || v < 1)
    throw LayoutError("layout '" + text + "': '" + part +
                      "' is not a positive integer; expected DxXxYxZ (data x X x Y x Z), e.g. 2x2x1x2");
  return v;
}

}  // namespace

Layout parse_layout(const std::string& text) {
  const auto colon = text.find(':');
  std::string sizes = text.substr(0, colon);
  // "...eN": expert parallelism.
  int experts = 1;
  bool flat = false;
  if (const auto e = sizes.find('e'); e != std::string::npos) {
    std::string part = sizes.substr(e + 1);
    if (!part.empty() && part.back() == 'f') {
      flat = true;
      part.pop_back();
    }
    int v = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || v < 1)
      throw LayoutError("layout '" + text + "': expert parallelism 'e" + part +
                        "' is not a positive integer; expected DxXxYxZeN, e.g. 4x2x1x1e2");
    experts = v;
    sizes.resize(e);
  }
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= sizes.size(); ++i) {
    if (i == sizes.size() || sizes[i] == 'x') {
      parts.push_back(sizes.substr(start, i - start));
      start = i + 1;
    }
  }
  if (parts.size() != 4)
    throw LayoutError("layout '" + text + "' has " + std::to_string(parts.size()) +
                      " sizes; expected four, DxXxYxZ (data x X x Y x Z), e.g. 2x2x1x2");
  Layout l;
  l.data = parse_size(parts[0], text);
  l.x = parse_size(parts[1], text);
  l.y = parse_size(parts[2], text);
  l.z = parse_size(parts[3], text);
  l.experts = experts;
  if (flat && (l.experts == 1 || l.y == 1))
    throw LayoutError("layout '" + text + "': 'f' (the flat token exchange) needs expert parallelism above 1 and G_y " +
                      "above 1, as only then do the y ranks have an exchange to split; drop the 'f'");
  if (flat) l.exchange = TokenExchange::flat;
  if (l.data % l.experts != 0)
    throw LayoutError("layout '" + text + "': expert parallelism " + std::to_string(l.experts) +
                      " does not divide the data axis " + std::to_string(l.data) +
                      "; expert groups cut the data axis, so use an E_p that divides D, e.g. " +
                      std::to_string(l.data) + "x" + parts[1] + "x" + parts[2] + "x" + parts[3] + "e1");
  // world() and every rank number are ints: refuse a product past INT_MAX before anything
  // multiplies the sizes (each is below 2^31, so the running product fits in int64_t).
  int64_t world = 1;
  for (int size : {l.data, l.x, l.y, l.z}) {
    world *= size;
    if (world > std::numeric_limits<int>::max())
      throw LayoutError("layout '" + text + "': the product of its sizes exceeds " +
                        std::to_string(std::numeric_limits<int>::max()) +
                        " ranks; data x X x Y x Z must equal the job's rank count, e.g. 2x2x1x2 for 8");
  }
  if (colon != std::string::npos) {
    const std::string order = text.substr(colon + 1);
    std::string sorted = order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != "dxyz")
      throw LayoutError("layout '" + text + "': axis order '" + order +
                        "' must use each of x, y, z, d once, fastest first, e.g. xyzd");
    for (size_t i = 0; i < 4; ++i) {
      const char ch = order[i];
      l.order[i] = ch == 'x' ? Axis::x : ch == 'y' ? Axis::y : ch == 'z' ? Axis::z : Axis::data;
    }
  }
  return l;
}

std::string format_layout(const Layout& l) {
  std::string text = std::to_string(l.data);
  for (int size : {l.x, l.y, l.z}) {
    text += 'x';
    text += std::to_string(size);
  }
  if (l.experts != 1) {
    text += 'e';
    text += std::to_string(l.experts);
    if (l.exchange == TokenExchange::flat && l.y > 1) text += 'f';
  }
  return text;
}

std::string format_order(const Layout& l) {
  std::string s;
  for (Axis a : l.order) s += axis_letter(a);
  return s;
}

std::string format_layout_with_order(const Layout& l) { return format_layout(l) + ":" + format_order(l); }

}  // namespace axonn
