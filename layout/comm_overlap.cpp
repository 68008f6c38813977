#include "layout/comm_overlap.hpp"

#include <algorithm>
#include <array>
#include <limits>

#include "core/number_text.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_volume.hpp"

namespace axonn {

namespace {

// The axes whose collectives the trainer starts beside compute when overlapping.
constexpr std::array<CommAxis, 5> kOverlappedAxes = {CommAxis::x, CommAxis::y, CommAxis::z, CommAxis::data,
                                                     CommAxis::expert_data};

bool overlappable(CommAxis axis) {
  return std::find(kOverlappedAxes.begin(), kOverlappedAxes.end(), axis) != kOverlappedAxes.end();
}

// Whether an overlappable axis of `layout` has groups over a tier where calibrate measured
// that overlap costs at some size on groups of their size; only then can "auto" turn it off.
bool may_cost(const Machine& machine, const Layout& layout) {
  for (const CommAxis axis : kOverlappedAxes) {
    if (layout.comm_size(axis) <= 1) continue;
    const OverlapCurve* curve = overlap_curve(machine, axis_link(machine, layout, axis), layout.comm_size(axis));
    if (curve != nullptr && curve->costs_somewhere()) return true;
  }
  return false;
}

// What overlapping would do at `layout`: the overlappable collectives' time per step and what
// the measured fractions hide of it, each call at its tier's fraction for its size (below 0:
// what it adds), before layout_cost.hpp's caps. At neither recomputation nor a sharded
// optimizer: the modes change how often some of these calls run, not their sizes, and the
// modes themselves are chosen with this decision made (layout_memory.hpp). The axis whose
// calls lose the most, with its tier and its calls' sizes, for the reason.
struct OverlapBalance {
  double overlapped_s = 0;
  double hidden_s = 0;
  CommAxis worst_axis = CommAxis::z;
  LinkTier worst_tier = LinkTier::intra_node;
  int64_t smallest = 0, largest = 0;  // of the worst axis's overlapped calls, bytes each
};
OverlapBalance overlap_balance(const ChooserInput& input, const Layout& layout) {
  // At one chunk where training.tp_chunks is "auto": the count is decided with overlap decided.
  ChooserInput at = input;
  if (at.batch.tp_chunks_auto()) at.batch.tp_chunks = 1;
  const StepVolume v = predict_step_volume(at, layout, MemoryModes{}, true);
  OverlapBalance b;
  std::array<double, kCommAxisCount> hidden{};
  for (const CollectiveCalls& calls : v.calls) {
    if (!calls.overlapped || !overlappable(calls.axis)) continue;
    const auto ai = static_cast<size_t>(calls.axis);
    const LinkTier tier = axis_link(input.machine, layout, calls.axis);
    const double t = collective_calls_seconds(input.machine, tier, calls, v.group_size[ai]);
    const double h = t * overlap_efficiency(input.machine, tier, static_cast<double>(calls.bytes), v.group_size[ai]);
    b.overlapped_s += t;
    b.hidden_s += h;
    hidden[ai] += h;
  }
  const auto worst = std::min_element(hidden.begin(), hidden.end());
  b.worst_axis = static_cast<CommAxis>(worst - hidden.begin());
  b.worst_tier = axis_link(input.machine, layout, b.worst_axis);
  b.smallest = std::numeric_limits<int64_t>::max();
  for (const CollectiveCalls& calls : v.calls)
    if (calls.overlapped && calls.axis == b.worst_axis)
      b.smallest = std::min(b.smallest, calls.bytes), b.largest = std::max(b.largest, calls.bytes);
  return b;
}

std::string ms_text(double seconds) { return format_number("%.3g ms", seconds * 1e3); }

// The site's key for the overlap of groups of `group_size` over `tier`:
// "network.intra_node.overlap", or "network.intra_node.groups (ranks = 2) overlap" where
// calibrate measured that size's own. By hand: the layout layer may not use config's table of
// tiers.
std::string site_overlap_key(const Machine& machine, LinkTier tier, int group_size) {
  std::string key = link_tier_name(tier);  // "intra-node"
  std::replace(key.begin(), key.end(), '-', '_');
  const MeasuredTier* measured = measured_tier(machine, tier);
  if (measured != nullptr && overlap_curve(machine, tier, group_size) != &measured->overlap)
    return "network." + key + ".groups (ranks = " + std::to_string(group_size) + ") overlap";
  return "network." + key + ".overlap";
}

}  // namespace

bool overlaps_comm(const ChooserInput& input, const Layout& layout) {
  if (input.overlap_comm) return *input.overlap_comm;
  return !may_cost(input.machine, layout) || overlap_balance(input, layout).hidden_s >= 0;
}

std::string overlap_reason(const ChooserInput& input, const Layout& layout) {
  if (input.overlap_comm) return std::string("training.overlap_comm = ") + (*input.overlap_comm ? "true" : "false");
  if (!may_cost(input.machine, layout))
    return "auto: on: no link tier of the overlapped axes (x, y, z, data, expert_data) has a negative "
           "network.<tier>.overlap in the site";
  const OverlapBalance b = overlap_balance(input, layout);
  if (b.hidden_s >= 0)
    return "auto: on: at the sizes of this layout's overlapped collectives the overlap calibrate measured "
           "(network.<tier>.overlap in the site) hides " +
           ms_text(b.hidden_s) + " of their " + ms_text(b.overlapped_s) + " per step";
  const int group_size = layout.comm_size(b.worst_axis);
  const std::string sizes = b.smallest == b.largest ? bytes_text(static_cast<double>(b.smallest))
                                                    : bytes_text(static_cast<double>(b.smallest)) + " to " +
                                                          bytes_text(static_cast<double>(b.largest));
  return "auto: off: on the " + comm_axis_name(b.worst_axis) + " axis's " + link_tier_name(b.worst_tier) +
         " links, with calls of " + sizes + ", calibrate measured that a collective started beside compute costs " +
         "more than one waited for where it is issued (" + site_overlap_key(input.machine, b.worst_tier, group_size) +
         " in the site: " + overlap_curve_text(*overlap_curve(input.machine, b.worst_tier, group_size)) +
         "); overlapped, this layout's collectives would take " + ms_text(-b.hidden_s) +
         " more per step (training.overlap_comm = true overlaps anyway)";
}

}  // namespace axonn
