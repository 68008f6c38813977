#include "layout/comm_overlap.hpp"

#include <array>
#include <cstdio>
#include <optional>

#include "layout/layout_cost.hpp"

namespace axonn {

namespace {

// The axes whose collectives the trainer starts beside compute when overlapping.
constexpr std::array<CommAxis, 3> kOverlappedAxes = {CommAxis::z, CommAxis::data, CommAxis::expert_data};

// The first axis of `layout` with groups over a tier where calibrate measured that overlap
// costs more than it hides; nullopt where there is none.
struct CostlyOverlap {
  CommAxis axis;
  LinkTier tier;
  double overlap;
};
std::optional<CostlyOverlap> costly_overlap(const Machine& machine, const Layout& layout) {
  for (const CommAxis axis : kOverlappedAxes) {
    if (layout.comm_size(axis) <= 1) continue;
    const LinkTier tier = axis_link(machine, layout, axis);
    if (const double overlap = overlap_efficiency(machine, tier); overlap < 0) return CostlyOverlap{axis, tier, overlap};
  }
  return std::nullopt;
}

}  // namespace

bool overlaps_comm(const ChooserInput& input, const Layout& layout) {
  if (input.overlap_comm) return *input.overlap_comm;
  return !costly_overlap(input.machine, layout);
}

std::string overlap_reason(const ChooserInput& input, const Layout& layout) {
  if (input.overlap_comm) return std::string("training.overlap_comm = ") + (*input.overlap_comm ? "true" : "false");
  const std::optional<CostlyOverlap> costly = costly_overlap(input.machine, layout);
  if (!costly)
    return "auto: on: no link tier of the overlapped axes (z, data, expert_data) has a negative "
           "network.<tier>.overlap in the site";
  char overlap[32];
  std::snprintf(overlap, sizeof overlap, "%.2f", costly->overlap);
  std::string key = link_tier_name(costly->tier);  // "intra-node" -> the site's table, intra_node
  for (char& c : key)
    if (c == '-') c = '_';
  return "auto: off: on the " + comm_axis_name(costly->axis) + " axis's " + link_tier_name(costly->tier) +
         " links calibrate measured an overlap of " + overlap + " (network." + key +
         ".overlap in the site): a collective started beside compute costs more than one waited for where it is "
         "issued (training.overlap_comm = true overlaps anyway)";
}

}  // namespace axonn
