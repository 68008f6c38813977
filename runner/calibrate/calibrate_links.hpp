#pragma once
// What `axonn calibrate` measures of the links: which tiers this allocation spans, one grid
// whose axes are groups over exactly one tier each, and the times of each collective kind
// over a sweep of message sizes (nccl-tests' sizes, layout/collective.hpp).
//
// The grid (default axis order, x fastest; ranks in blocks of P per node, Slurm's block
// distribution, as the layout model assumes):
//   x    = the P ranks of one node                       -> intra-node
//   z    = one rank of each of the S nodes of a switch   -> inter-node
//   data = one rank per switch                           -> inter-switch
// and without a switch map (or with every node under one switch) z = 1 and data = one rank
// per node, inter-node. Every rank is in one group of each axis, so when calibrate times an
// axis, all of its groups run at once: a node's ranks share its links (its memory bandwidth,
// its network card) as they do when the trainer runs.
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "config/site_config.hpp"
#include "layout/layout.hpp"
#include "layout/layout_cost.hpp"
#include "layout/layout_inputs.hpp"
#include "runner/pmix/topology.hpp"
#include "trainer/backend.hpp"

namespace axonn {

struct TierProbe {
  LinkTier tier;
  CommAxis axis;   // the grid axis whose groups span exactly this tier
  int group_size;  // ranks per group, >= 2
};

// A tier measured again on groups of another size, on a grid of its own whose `axis` groups
// have `group_size` ranks over `tier`, all of them at once (the trainer runs an axis's groups
// together, and where ranks share cores or links a group's price depends on how many ranks
// it has and how many groups run beside it):
//   intra-node: groups of every divisor G of P with 2 <= G < P: x = G, y = P / G
//   inter-node (no switch map): groups of J ranks of every node, J dividing P, 1 < J <= P:
//               x = P / J, data = nodes * J
struct GroupProbe {
  LinkTier tier;
  Layout layout;
  CommAxis axis;
  int group_size;
};

struct LinkPlan {
  Layout layout;                     // the grid above
  std::vector<TierProbe> probes;     // the tiers measured, intra-node first
  std::vector<GroupProbe> groups;    // the same tiers on groups of other sizes
  std::vector<std::string> missing;  // "inter-node: one node", one per tier not measured
};

// "intra-node,inter-node" (the names link_tier_name prints) -> tiers; UsageError naming a
// bad word and the valid ones.
std::vector<LinkTier> parse_tiers(const std::string& text);

// The plan for this allocation. Throws UsageError when the ranks are not the same number on
// every node or not placed in blocks, and when a tier in `required` (calibrate --tiers)
// cannot be measured here, naming why and what allocation would measure it.
LinkPlan plan_links(const Topology& topology, const SiteConfig& site, const std::vector<LinkTier>& required);

// Message sizes in bytes: 4 KiB doubling up to 256 MiB, or to 4 MiB when quick.
std::vector<double> message_sizes(bool quick);
inline constexpr double kLargestMessage = 256.0 * 1024 * 1024;
// Timed calls per size (after one untimed): enough for a stable mean where calls are
// short, few where one call takes a large part of a second. Up to 64 KiB 100: a call there
// takes tens of microseconds but one in five to twenty waits out a peer's lost time slice
// (milliseconds on shared cores), and the mean of 20 moved by more than the call itself from
// one size to the next, which left the small-message line unfitted. The same when quick (which
// is quick by stopping at 4 MiB): with 5 calls a lost time slice put the 4-64 KiB all-reduces
// of 4 ranks on 2 cores at 2-3 ms, ten times the trainer's, and the tiny job's step with them.
int message_repetitions(double bytes);

// Device buffers for the largest message so far, grown when a larger one comes.
class CollectiveBuffers {
 public:
  explicit CollectiveBuffers(Backend& backend) : backend_(backend) {}
  float* in() { return in_.data(); }
  float* out() { return out_.data(); }
  void reserve(double bytes);  // zeros, at least `bytes` in each

 private:
  Backend& backend_;
  DeviceBuffer<float> in_, out_;
};

// The size a call of `kind` moves when asked for `bytes` on groups of `n`: float32 elements,
// the nccl-tests size rounded down to a multiple of 4 * n (all-reduce: of 4).
double collective_bytes(CollectiveKind kind, double bytes, int n);

// This rank's seconds of `kind` on `c` at each size: in each of kTimingPasses passes over the
// sizes, the mean of pass_repetitions(message_repetitions) calls, then the median of the passes
// (median_over_passes). A step's time is the sum of its calls', so within a pass the mean: the
// rare call that waits out a peer's lost time slice included (a median of calls leaves those
// out, and training then runs slower than priced); across passes the median, so that seconds
// of a slowed machine land in one pass of a size rather than in all its calls. Every rank of
// the grid calls it for the same axis at the same time. On NCCL each call is waited for
// (synchronize) before the clock stops: a time is what the host sees, as the trainer does when
// it waits. `compute` runs, untimed, before every call: in training a collective follows
// compute on every rank, and a rank's time in it includes waiting for peers whose compute ended
// later (noise, or ranks that share cores losing theirs to time-slicing); back-to-back calls
// keep the ranks in step and would not show that wait.
// cpu_seconds: per size the same for the CPU time this process ran inside the calls (copying,
// summing, the sockets' system calls; in the calling thread on Gloo's sync pairs, in Gloo's
// own threads on its ring): what a call keeps the cores busy for where ranks share them.
struct CollectiveTimes {
  std::vector<double> seconds;
  std::vector<double> cpu_seconds;
};
CollectiveTimes time_collective(Communicator& c, CollectiveKind kind, const std::vector<double>& sizes,
                                CollectiveBuffers& buffers, const std::function<void()>& compute);

// The times a fit needs: message_sizes(quick), then doubled sizes while the largest takes
// less than twice the smallest (up to kLargestMessage), since below that the bandwidth term
// is lost in the latency's noise (a quick sweep on slow links). `over_ranks` turns this
// rank's means into the medians over every rank (a collective: the same answer on every
// rank, so every rank extends alike).
struct CollectiveSweep {
  std::vector<double> bytes;        // collective_bytes of each size
  std::vector<double> seconds;      // the median over ranks of time_collective's
  std::vector<double> cpu_seconds;  // the same of its cpu_seconds
};
CollectiveSweep sweep_collective(Communicator& c, CollectiveKind kind, bool quick, CollectiveBuffers& buffers,
                                 const std::function<void()>& compute,
                                 const std::function<std::vector<double>(const std::vector<double>&)>& over_ranks);

// The overlap probe: how much of a collective's time running it beside compute hides, against
// the same collective waited for where it is issued. Each round times three loops of
// kOverlapCalls, per call: `compute` alone (compute_s); `compute` then an all-reduce of
// `bytes` (nccl-tests size) waited for, less the compute (collective_s: the call as the
// model prices a blocking one, after compute, waiting for the group's slowest member
// included); and the all-reduce started (Communicator::start_all_reduce), `compute`, the
// all-reduce finished (both_s): what the trainer does with its overlapped collectives, one
// after another as it starts one per layer. Several in a row because what overlap costs is per
// call: where every core already runs a rank's compute (CPU ranks on all of a host's cores)
// each started call hands work to the communicator's thread, which waits for a time slice on
// a busy core, and the loop of started calls takes longer than the loop of waited ones (2 CPU
// ranks on 2 cores: 8 calls of 64 KiB cost 0.6-1.4x their time more; one call after a barrier
// showed none of it). Four calls a loop: each round then times twelve calls' worth of work,
// where the one-call probe timed three. The round's loops run in turn, the group's ranks starting each together
// (a barrier), so that a change in the machine's load falls on all three alike rather than on
// whichever was timed then. Every rank of the group calls it at the same time. `hidden` is the
// median over the rounds of each round's overlap_fraction: a round where a lost time slice
// stretched one loop moves a fraction of the means by up to the whole shorter side, and moves
// the median by one rank of the rounds.
inline constexpr int kOverlapCalls = 4;
struct OverlapTimes {
  double compute_s = 0;
  double collective_s = 0;
  double both_s = 0;
  double hidden = 0;
};
OverlapTimes time_overlap(Communicator& c, double bytes, int rounds, CollectiveBuffers& buffers,
                          const std::function<void()>& compute);

// The time-sharing probe: where a node's ranks outnumber its cores, how much of a blocking
// collective's time the other ranks compute through. Every group of an axis at once (as the
// trainer runs them), in `rounds` rounds after one untimed: kSharingCalls times `compute`
// alone, then kSharingCalls times `compute` followed by a blocking all-reduce of `bytes` in
// the group, each call timed as time_collective times it (after compute, so waiting for the
// group's slowest member included: what the model prices a blocking call at). Every rank of
// the grid starts each loop together (`together`, a barrier over all of them). While a group
// waits, the cores its ranks leave run the other groups' ranks, whose compute ends sooner:
// the second loop takes less than its computes alone plus its calls. OverlapTimes here:
// compute_s the computes alone, collective_s the time in the calls, both_s the second loop,
// and `hidden` the median of the rounds' overlap_fraction, (compute + calls - both) / calls:
// the fraction the model takes off a blocking collective (MeasuredTier::filled_by_others).
// Several calls per loop, as a step has several collectives: the ranks drift apart over them
// as in training, which one call after a barrier would not show.
inline constexpr int kSharingCalls = 8;
OverlapTimes time_sharing(Communicator& c, double bytes, int rounds, CollectiveBuffers& buffers,
                          const std::function<void()>& compute, const std::function<void()>& together);

// The all-reduce sizes the overlap probe measures (nccl-tests size), ascending: with a job,
// the smallest and the largest of the overlapped calls (StepVolume::calls with `overlapped`:
// the data gradient buckets, the z all-gathers and reduce-scatters) of every layout of `world`
// ranks that divides it, at least 4 KiB, one size where they are the same; else
// kDefaultOverlapSizes. How much of a collective hides changes with its size
// (layout/overlap_curve.hpp): a small call is mostly handoffs, which wait for a time slice
// where compute holds every core (4 CPU ranks on 2 cores, 4 calls in a row beside GEMMs:
// 33% of a 192 KiB all-reduce hidden while the 16-64 KiB z calls of a layout ran 28% over
// their blocking price); a large one's bandwidth term is copying and summing, which on CPU
// ranks takes the cores the compute needs. The model interpolates between the two.
inline constexpr double kSmallestOverlapProbe = 4096;  // the sweeps' smallest size
inline constexpr std::array<double, 2> kDefaultOverlapSizes = {64.0 * 1024, 4.0 * 1024 * 1024};
std::vector<double> overlap_probe_sizes(const std::optional<ChooserInput>& job, int world);

// GEMMs of `gemm_s` each that together last about twice `collective_s`, at least 1: the
// probe's compute, longer than the collective beside it, as a block's backward is against
// its gradient bucket, so that all of the collective could hide and the fraction below
// measures how much does (the collective's time alone varies from one measurement to the
// next by more than a GEMM, so compute sized to match it exactly came out shorter at times).
int overlap_gemm_count(double gemm_s, double collective_s);

// The fraction of the collective's time that running it beside the compute hid,
// (compute + collective - both) / collective, within [-1, 1]: 1 when the pair took as long as
// the compute alone (compute at least as long as the collective), 0 when as long as both in
// turn, below 0 when longer (started beside compute the collective cost more than waited for;
// -1: twice its time, or more). What the model takes off an overlapped collective's time (a
// negative fraction adds), and below 0 what makes training.overlap_comm = "auto" not overlap.
double overlap_fraction(const OverlapTimes& t);

// The fraction of the host's cores that a tier's collectives keep busy for their time, from
// its sweeps (every kind): per size, a rank's CPU seconds in a call per second of it times the
// host's ranks per core (every rank of the host runs its own call meanwhile), the median over
// the sizes and kinds, within [0, 1]. On 8 ranks of 2 cores a 128 KiB all-gather of 604 us ran
// 101 us on a core: 67% of the cores busy. MeasuredTier::cores_busy: the part of a collective's
// time that neither credit of the model takes off.
double cores_busy_fraction(const std::vector<CollectiveSweep>& sweeps, double ranks_per_core);

}  // namespace axonn
