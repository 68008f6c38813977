#pragma once
// Predicted step time of a layout: compute from peak FLOP/s x efficiency, plus every
// collective of layout_volume.hpp priced by the ring formulas (collective.hpp) over the
// slowest link its group spans. The collectives the trainer runs beside compute
// (CollectiveCalls::overlapped, with training.overlap_comm, comm_overlap.hpp) are hidden by
// the fraction the site measured for their tier at their size (MeasuredTier::overlap;
// calibrate's overlap probe), at most the compute they run beside: the data axis's beside one micro-batch's
// compute (they start in the last backward), the z axis's beside the whole step's, each x and y
// all-reduce of dX beside its layer's dW GEMM (CollectiveCalls::beside, at that shape's rate). Without a
// measured fraction nothing is hidden, and the prediction is an upper bound for overlapping
// backends; a fraction below zero adds that part of the calls' time (a tier where overlap
// costs: "auto" does not overlap there, a job that forces it pays). Where a
// node's ranks take turns on its cores (more CPU ranks than cores), a blocking collective's
// wait is partly other ranks' compute time: the fraction the site measured for its tier and
// group size (MeasuredTier::filled_by_others; calibrate's time-sharing probe) is taken off,
// at most the compute not already beside a hidden collective. Neither credit takes off the
// part of a collective's time that its own ranks keep the node's cores busy for
// (MeasuredTier::cores_busy; calibrate's sweeps): cores that copy and sum compute nothing else.
//
// A calibrated site (`axonn calibrate`; Machine's measured fields) replaces the guesses with
// what was measured, and nothing else changes: each linear layer's GEMMs at the rate measured
// for its shape (else the measured GEMM rate), attention at its measured rate (else the
// GEMM rate), each collective kind by the alpha-beta fitted for it on its tier, and the
// memory-bound ops' bytes (memory_bound_bytes.hpp) at the measured elementwise rate, added to
// the compute time.
#include <array>
#include <optional>

#include "layout/layout.hpp"
#include "layout/layout_memory.hpp"
#include "layout/layout_volume.hpp"

namespace axonn {

enum class LinkTier { none = 0, intra_node = 1, inter_node = 2, inter_switch = 3 };
const char* link_tier_name(LinkTier tier);  // "-", "intra-node", "inter-node", "inter-switch"

// The slowest tier any group along `axis` spans under block placement (node = rank /
// tasks_per_node, switch = node / nodes_per_switch). Exact without listing ranks:
// the groups along an axis with stride s and size n tile the ranks in aligned blocks of
// s*n consecutive ranks, each block holding s groups interleaved. If s*n divides the
// ranks per node P, every block lies inside one node. If not, some block straddles a
// node boundary at a multiple of P (the world is larger than a node), and the group of
// the last rank before the boundary, or the one of the first rank after it, has members
// on both sides: with n >= 2 a group's members are s apart, and both neighbours of the
// boundary sit less than s*n from the block's ends. The same argument one tier up
// uses P * nodes_per_switch.
LinkTier axis_link(const Machine& machine, const Layout& layout, CommAxis axis);

// Bytes per rank and step on each link tier, indexed by LinkTier: each axis's bytes
// (axis_bytes, indexed by CommAxis) on the tier its groups span (axis_link). A group that
// spans nodes counts whole on the inter-node tier, as the cost model prices it.
using TierBytes = std::array<int64_t, 4>;
TierBytes bytes_per_tier(const Machine& machine, const Layout& layout,
                         const std::array<int64_t, kCommAxisCount>& axis_bytes);
// The predicted bytes of `volume` per axis: every kind, or only `kind` (e.g. all_to_all).
std::array<int64_t, kCommAxisCount> bytes_per_axis(const StepVolume& volume);
std::array<int64_t, kCommAxisCount> bytes_per_axis(const StepVolume& volume, CollectiveKind kind);

// What calibrate measured of `tier` (Machine::*_measured); nullptr for none (a group of one
// spans no link).
const MeasuredTier* measured_tier(const Machine& machine, LinkTier tier);

// The alpha-beta that prices `kind` on `tier`: the one fitted for that kind, else the tier's
// Link (none: the intra-node one, never used, as a group of one makes no collective).
const Link& collective_link(const Machine& machine, LinkTier tier, CollectiveKind kind);
// The small-message fit of `kind` on `tier`, nullptr where the site has none.
const SmallMessageLink* small_message_link(const Machine& machine, LinkTier tier, CollectiveKind kind);
// The Link for one call of `bytes` (nccl-tests size): the small-message fit where the site
// has one for the kind and the call is within its max_bytes, else collective_link's.
const Link& collective_link(const Machine& machine, LinkTier tier, CollectiveKind kind, int64_t bytes);
// The same on groups of `group_size`: the fit calibrate measured on groups of that size
// (MeasuredTier::groups) where it has one for the kind, else the tier's.
const Link& collective_link(const Machine& machine, LinkTier tier, CollectiveKind kind, int64_t bytes, int group_size);

// The overlap measured for collectives on groups of `group_size` over `tier`: the group
// size's MeasuredGroup::overlap where calibrate measured one, else MeasuredTier::overlap;
// nullptr where the tier is unmeasured.
const OverlapCurve* overlap_curve(const Machine& machine, LinkTier tier, int group_size);
// The fraction of an overlapped collective's time hidden behind compute on groups of
// `group_size` over `tier`, for a call of `bytes` (nccl-tests size; the group size's
// MeasuredGroup::overlap where calibrate measured one, else MeasuredTier::overlap, at that
// size; -1 to 1, 0 where unmeasured).
double overlap_efficiency(const Machine& machine, LinkTier tier, double bytes, int group_size);

// The fraction of a blocking collective's time on groups of `group_size` over `tier` that
// other ranks sharing the cores compute through (MeasuredTier::filled_by_others; the group
// size's own where calibrate measured it, else the tier's; 0 to 1).
double filled_by_others(const Machine& machine, LinkTier tier, int group_size);
// The fraction of the node's cores that a collective on groups of `group_size` over `tier`
// keeps busy for its time (MeasuredTier::cores_busy; the group size's own, else the tier's).
double cores_busy(const Machine& machine, LinkTier tier, int group_size);

// One call of `kind` and `bytes` on groups of `group_size` over `tier` as calibrate's sweep
// measured it (MeasuredSweep::seconds_at: the group size's sweep, else the tier's where its
// probe ran on groups of that size); nullopt where no sweep covers the size.
std::optional<double> measured_call_seconds(const Machine& machine, LinkTier tier, CollectiveKind kind, double bytes,
                                            int group_size);

// Seconds of `calls` (each of calls.bytes) in groups of `group_size` over a link of `tier`:
// per call the measured sweep's time where one covers it (measured_call_seconds), else
// ring_steps·α + bus_factor·bytes/β of the collective's fitted line for that size.
double collective_calls_seconds(const Machine& machine, LinkTier tier, const CollectiveCalls& calls, int group_size);

// The GEMM of each layer of linear_shapes on one rank of `layout`, in the same order.
std::array<GemmShape, 5> local_gemm_shapes(const ChooserInput& input, const Layout& layout);

// FLOP/s of `shape`'s GEMMs: the rate measured for it, else the measured GEMM rate, else
// peak x efficiency.
double gemm_rate(const Machine& machine, const GemmShape& shape);

struct CostEstimate {
  Recompute recompute = Recompute::none;  // the mode it is priced at
  double flops = 0;                       // per rank per step: the model's (what MFU counts)
  double recompute_flops = 0;             // per rank per step: the recomputed forwards, on top
  double compute_s = 0;                   // (flops + recompute_flops) at peak x efficiency, or at the measured rates
  double memory_bound_s = 0;              // of compute_s: the memory-bound ops at the measured elementwise rate
  std::array<double, kCommAxisCount> comm_s{};
  std::array<LinkTier, kCommAxisCount> link{};
  double overlapped_s = 0;  // of the comm_s: the collectives the trainer runs beside compute
  double hidden_s = 0;      // of overlapped_s: the time hidden behind compute, not in the step (negative:
                            // the overlap's extra time, in the step)
  // The same two per axis: hidden_s's share of each (the caps shared in proportion).
  std::array<double, kCommAxisCount> overlapped_axis_s{};
  std::array<double, kCommAxisCount> hidden_axis_s{};
  double filled_s = 0;      // of the blocking rest: the time other ranks on the same cores compute through
  double busy_s = 0;        // of the comm_s: the time the collectives keep the cores busy, which neither
                            // hidden_s nor filled_s takes off
  double comm_total_s() const;
  double step_s() const { return compute_s + comm_total_s() - hidden_s - filled_s; }
};

// FLOPs per rank per step: per micro-batch 6*m*k*n/(G_a*G_b) per linear (forward and both
// backward GEMMs) plus attention 12*mb*(H/G_y)*T^2*(C/H) per block.
double flops_per_rank(const ChooserInput& input, const Layout& layout);

// FLOPs per rank per step that recomputation `mode` adds: per micro-batch, for each of the
// L - 1 recomputed blocks, the forward GEMMs it reruns, 2*m*k*n/(G_a*G_b) (attention: qkv;
// block: qkv, attn.proj and mlp.fc), plus the attention forward 4*mb*(H/G_y)*T^2*(C/H).
double recompute_flops_per_rank(const ChooserInput& input, const Layout& layout, Recompute mode);

// The volume must be predict_step_volume's at the same modes (optimizer sharding changes
// only the volume: the data axis's reduce-scatters and all-gathers instead of all-reduces).
CostEstimate estimate_cost(const ChooserInput& input, const Layout& layout, const StepVolume& volume,
                           MemoryModes modes);
// At the modes this job runs at this layout (resolved_modes).
CostEstimate estimate_cost(const ChooserInput& input, const Layout& layout, const StepVolume& volume);

}  // namespace axonn
