#pragma once
// Whether the trainer runs its overlappable collectives beside compute at a layout
// (training.overlap_comm): the forward's z all-gathers, the weight gradients' z
// reduce-scatters, the backward's x and y all-reduces of dX (beside the dW GEMMs) and the last
// backward's gradient buckets over data (and expert_data).
//
// "auto" (ChooserInput::overlap_comm unset) overlaps unless `axonn calibrate` measured, on the
// tiers of the axes whose collectives would overlap, that a collective started beside compute
// costs more than one waited for where it is issued (MeasuredTier::overlap < 0 at some size),
// and the layout's overlapped calls, each priced at the fraction for its size, would cost
// more than they hide. That is what the CPU backend measures where every core already runs a
// rank's compute: the communicator's thread then takes its turns on those cores, every
// handoff waits for a time slice, and the step is longer than with blocking calls. A tier
// calibrate did not measure keeps overlap on (NCCL runs it on its own stream). The layout
// model prices the layout the way the trainer runs it: predict_step_volume marks the calls
// overlapped only when this says so.
#include <string>

#include "layout/layout.hpp"
#include "layout/layout_inputs.hpp"

namespace axonn {

bool overlaps_comm(const ChooserInput& input, const Layout& layout);

// Why, one line for the trainer's log and `axonn layout --explain`: "training.overlap_comm =
// false", "auto: on: ...", "auto: off: on the z axis's intra-node links, with calls of ...".
std::string overlap_reason(const ChooserInput& input, const Layout& layout);

}  // namespace axonn
