#pragma once
// The 4D grid: World = G_data x G_z x G_y x G_x, its rank numbering and its groups.
// Pure math, no I/O (docs/architecture.md, "The 4D grid"; docs/parallel-plan.md).
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "layout/layout_inputs.hpp"

namespace axonn {

// A grid axis. Tensor-parallel axes x, y, z, then data parallel.
enum class Axis { x = 0, y = 1, z = 2, data = 3 };
inline constexpr std::array<Axis, 4> kAllAxes = {Axis::x, Axis::y, Axis::z, Axis::data};
char axis_letter(Axis axis);        // 'x', 'y', 'z', 'd'
std::string axis_name(Axis axis);   // "x", "y", "z", "data"

// The groups communication is counted on: the four grid axes plus the whole job
// (the per-step loss all-reduce).
enum class CommAxis { x = 0, y = 1, z = 2, data = 3, world = 4 };
inline constexpr int kCommAxisCount = 5;
std::string comm_axis_name(CommAxis axis);  // "x", "y", "z", "data", "world"
inline CommAxis comm_axis(Axis axis) { return static_cast<CommAxis>(static_cast<int>(axis)); }

// Bad layout text or a layout that does not match the job; the message names the
// value and the expected form.
// Exit code 2: nothing was started.
class LayoutError : public Error {
 public:
  explicit LayoutError(const std::string& message, int exit_code = exit_code::bad_input) : Error(message, exit_code) {}
};

struct Coords {
  int x = 0, y = 0, z = 0, data = 0;
  const int& operator[](Axis a) const;
  int& operator[](Axis a);
  bool operator==(const Coords&) const = default;
};

struct Layout {
  int data = 1, x = 1, y = 1, z = 1;
  // order[0] varies fastest in rank numbering. The default gives
  // rank = ((d*G_z + z)*G_y + y)*G_x + x, so x groups are node-local first.
  std::array<Axis, 4> order = {Axis::x, Axis::y, Axis::z, Axis::data};

  int size(Axis a) const;
  int world() const { return data * x * y * z; }
  int tensor_parallel() const { return x * y * z; }
  // Distance in rank numbers between neighbours along `a`: product of the faster axes.
  int stride(Axis a) const;

  Coords coords(int rank) const;
  int rank(const Coords& c) const;
  // World ranks of the group along `a` containing `rank`, in group-rank order.
  std::vector<int> group(Axis a, int rank) const;
  // Every group along `a`, each in group-rank order; together they cover the world once.
  std::vector<std::vector<int>> groups(Axis a) const;

  bool operator==(const Layout&) const = default;
};

// "DxXxYxZ" (e.g. "2x2x1x2": data 2, x 2, y 1, z 2), optionally ":ORDER" with ORDER the
// four letters x, y, z, d fastest first (e.g. "2x2x1x2:yxzd").
Layout parse_layout(const std::string& text);
std::string format_layout(const Layout& layout);  // "2x2x1x2"
std::string format_order(const Layout& layout);   // "xyzd"
std::string format_layout_with_order(const Layout& layout);  // "2x2x1x2:xyzd"

}  // namespace axonn
