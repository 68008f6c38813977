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

// A grid axis. Tensor-parallel axes x, y, z, then data parallel; then the two cuts of the
// data axis by expert parallelism E_p, which split and replicate expert parameters
// (trainer/model/parameters.hpp) but are not axes of the rank numbering: `expert`, the expert
// rank d mod E_p (size E_p), and `expert_data`, d / E_p (size G_data/E_p: the data
// coordinates holding the same experts, the whole data axis at E_p = 1). Their values are
// the CommAxis values of the same names.
enum class Axis { x = 0, y = 1, z = 2, data = 3, expert = 5, expert_data = 6 };
// The grid axes (the rank numbering's), without the data axis' cuts.
inline constexpr std::array<Axis, 4> kAllAxes = {Axis::x, Axis::y, Axis::z, Axis::data};
char axis_letter(Axis axis);        // 'x', 'y', 'z', 'd' (grid axes only)
std::string axis_name(Axis axis);   // "x", "y", "z", "data", "expert", "expert_data"

// The groups communication is counted on: the four grid axes, the whole job (the per-step
// loss all-reduce), and in MoE jobs the two cuts of the data axis by expert parallelism:
// `expert` (the token all-to-all among the E_p ranks that share a batch's experts) and
// `expert_data` (the G_data/E_p ranks holding the same experts, which all-reduce their
// gradients). Without expert parallelism (E_p = 1) there is no cut: both have groups of one
// rank, and expert weights are reduced over data like every other weight.
enum class CommAxis { x = 0, y = 1, z = 2, data = 3, world = 4, expert = 5, expert_data = 6 };
inline constexpr int kCommAxisCount = 7;
// "x", "y", "z", "data", "world", "expert", "expert_data"
std::string comm_axis_name(CommAxis axis);
inline CommAxis comm_axis(Axis axis) { return static_cast<CommAxis>(static_cast<int>(axis)); }

// Bad layout text or a layout that does not match the job; the message names the
// value and the expected form.
// Exit code 2: nothing was started.
class LayoutError : public Error {
 public:
  explicit LayoutError(const std::string& message, int exit_code = exit_code::bad_input) : Error(message, exit_code) {}
};

// A rank's coordinates on the grid axes (Layout::coordinate also gives the data axis' cuts).
struct Coords {
  int x = 0, y = 0, z = 0, data = 0;
  // A grid axis' coordinate; throws LayoutError for the cuts `expert` and `expert_data`.
  const int& operator[](Axis a) const;
  int& operator[](Axis a);
  bool operator==(const Coords&) const = default;
};

// How the G_y ranks of a y group, which hold the same tokens, send them over the expert axis
// (MoE under expert parallelism, docs/moe.md "The hierarchical exchange"): `hierarchical`
// (the default) has each send 1/G_y of the rows over the expert group and the y group
// all-gather what arrived, so the expert axis's links carry 1/G_y of the bytes and the y
// axis's carry the rest; `flat` has every y rank send all of its rows. The chooser prices
// both (a y group inside a node and an expert group across nodes favour hierarchical).
enum class TokenExchange { hierarchical, flat };

struct Layout {
  int data = 1, x = 1, y = 1, z = 1;
  // order[0] varies fastest in rank numbering. The default gives
  // rank = ((d*G_z + z)*G_y + y)*G_x + x, so x groups are node-local first.
  std::array<Axis, 4> order = {Axis::x, Axis::y, Axis::z, Axis::data};
  // Expert parallelism E_p (MoE jobs): divides data. Data coordinate d is expert rank
  // d mod E_p of expert group d / E_p, so an expert group is E_p consecutive data
  // coordinates (the nearest in rank numbering). 1: every rank holds every expert.
  int experts = 1;
  // With experts > 1 and y > 1; otherwise the exchange has nothing to split.
  TokenExchange exchange = TokenExchange::hierarchical;

  int size(Axis a) const;  // every Axis, the data axis' cuts included
  // The coordinate of `c` along `a`, the data axis' cuts included.
  int coordinate(const Coords& c, Axis a) const;
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
  // World ranks of the communication group `a` containing `rank` (a grid axis, the world,
  // or an expert cut of the data axis), in group-rank order.
  std::vector<int> comm_group(CommAxis a, int rank) const;
  int comm_size(CommAxis a) const;  // members of every group of `a`
  // Distance in rank numbers between neighbours of a group of `a` (1 for the world): a
  // group of `a` lies inside an aligned block of comm_stride(a)·comm_size(a) ranks.
  int comm_stride(CommAxis a) const;

  bool operator==(const Layout&) const = default;
};

// "DxXxYxZ" (e.g. "2x2x1x2": data 2, x 2, y 1, z 2), optionally "eN" for expert
// parallelism N (a divisor of D; e.g. "4x2x1x1e2"), then "f" for the flat token exchange
// (N > 1 and Y > 1; e.g. "2x1x4x1e2f"), optionally ":ORDER" with ORDER the four letters x, y,
// z, d fastest first (e.g. "2x2x1x2:yxzd", "4x2x1x1e2:yxzd").
Layout parse_layout(const std::string& text);
std::string format_layout(const Layout& layout);  // "2x2x1x2", "4x2x1x1e2" (no "e1"), "2x1x4x1e2f"
std::string format_order(const Layout& layout);   // "xyzd"
std::string format_layout_with_order(const Layout& layout);  // "2x2x1x2:xyzd"

}  // namespace axonn
