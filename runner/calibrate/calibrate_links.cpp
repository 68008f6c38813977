#include "runner/calibrate/calibrate_links.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runner/cli/args.hpp"
#include "runner/calibrate/mean_seconds.hpp"
#include "config/switch_map.hpp"
#include "core/cpu_clock.hpp"
#include "core/wall_clock.hpp"
#include "layout/layout_search.hpp"
#include "layout/layout_volume.hpp"
#include "layout/model_plan.hpp"

namespace axonn {
namespace {

constexpr std::array<LinkTier, 3> kTiers = {LinkTier::intra_node, LinkTier::inter_node, LinkTier::inter_switch};

// Elements per rank's block: all-reduce counts its whole buffer; all-gather's output,
// reduce-scatter's input and all-to-all's send buffer are n blocks.
size_t block_count(CollectiveKind kind, double bytes, int n) {
  const double per_block = kind == CollectiveKind::all_reduce ? bytes : bytes / n;
  return std::max<size_t>(1, static_cast<size_t>(per_block / sizeof(float)));
}

}  // namespace

std::vector<LinkTier> parse_tiers(const std::string& text) {
  std::vector<LinkTier> tiers;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string word = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto it = std::find_if(kTiers.begin(), kTiers.end(), [&](LinkTier t) { return word == link_tier_name(t); });
    if (it == kTiers.end())
      throw UsageError("--tiers " + text + ": '" + word +
                       "' is not a link tier; use a comma-separated list of intra-node, inter-node, inter-switch");
    if (std::find(tiers.begin(), tiers.end(), *it) == tiers.end()) tiers.push_back(*it);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return tiers;
}

LinkPlan plan_links(const Topology& topology, const SiteConfig& site, const std::vector<LinkTier>& required) {
  const int per_node = topology.uniform_tasks_per_node();
  if (per_node == 0)
    throw UsageError("calibrate needs the same number of ranks on every node (" + describe(topology) +
                     "); start it with srun --ntasks-per-node=N (or -N nodes and -n a multiple of them)");
  for (int r = 0; r < topology.world; ++r)
    if (topology.node_of_rank[static_cast<size_t>(r)] != r / per_node)
      throw UsageError("calibrate needs the ranks placed in blocks, ranks 0.." + std::to_string(per_node - 1) +
                       " on the first node and so on, as the layout model assumes; rank " + std::to_string(r) +
                       " is on node " + std::to_string(topology.node_of_rank[static_cast<size_t>(r)]) +
                       ": start it with srun --distribution=block");
  const int nodes = topology.nodes;
  int per_switch = allocation_nodes_per_switch(site, nodes, topology.hostnames);
  std::string switch_note;
  if (per_switch == 0 || per_switch >= nodes) {
    switch_note = site.nodes_per_switch == 0 && site.switches.empty()
                      ? "the site has no switch map (network.nodes_per_switch or network.switches)"
                      : "the allocation's " + std::to_string(nodes) + " node(s) are under one switch";
    per_switch = 0;
  } else if (nodes % per_switch != 0) {
    switch_note = "the allocation's " + std::to_string(nodes) + " nodes do not fill switches of " +
                  std::to_string(per_switch) + " nodes evenly";
    per_switch = 0;
  }
  LinkPlan plan;
  plan.layout.x = per_node;
  plan.layout.z = per_switch > 0 ? per_switch : 1;
  plan.layout.data = per_switch > 0 ? nodes / per_switch : nodes;
  const CommAxis inter_node_axis = per_switch > 0 ? CommAxis::z : CommAxis::data;
  const int inter_node_size = per_switch > 0 ? per_switch : nodes;
  auto probe = [&](LinkTier tier, CommAxis axis, int size, const std::string& why_not) {
    if (size >= 2)
      plan.probes.push_back({tier, axis, size});
    else
      plan.missing.push_back(std::string(link_tier_name(tier)) + ": " + why_not);
  };
  probe(LinkTier::intra_node, CommAxis::x, per_node,
        "one rank per node (" + std::to_string(topology.world) + " rank(s) on " + std::to_string(nodes) +
            " node(s)); run at least 2 ranks on a node (axonn run -n 2, srun --ntasks-per-node=2)");
  probe(LinkTier::inter_node, inter_node_axis, inter_node_size,
        per_switch > 0 ? "one node per switch; run on at least 2 nodes under one switch"
                       : "one node; run on at least 2 nodes (srun -N 2)");
  probe(LinkTier::inter_switch, CommAxis::data, per_switch > 0 ? plan.layout.data : 1,
        switch_note + "; run on nodes under at least 2 switches of a site config that maps them");
  const auto planned = [&](LinkTier tier) {
    return std::any_of(plan.probes.begin(), plan.probes.end(), [&](const TierProbe& p) { return p.tier == tier; });
  };
  if (planned(LinkTier::intra_node))
    for (int g = 2; g < per_node; ++g) {
      if (per_node % g != 0) continue;
      GroupProbe& group = plan.groups.emplace_back(GroupProbe{LinkTier::intra_node, plan.layout, CommAxis::x, g});
      group.layout.x = g;
      group.layout.y = per_node / g;
    }
  if (planned(LinkTier::inter_node) && per_switch == 0)
    for (int j = 2; j <= per_node; ++j) {
      if (per_node % j != 0) continue;
      GroupProbe& group =
          plan.groups.emplace_back(GroupProbe{LinkTier::inter_node, plan.layout, CommAxis::data, nodes * j});
      group.layout.x = per_node / j;
      group.layout.data = nodes * j;
    }
  for (const LinkTier tier : required) {
    if (planned(tier)) continue;
    const std::string name = link_tier_name(tier);
    const auto why = std::find_if(plan.missing.begin(), plan.missing.end(),
                                  [&](const std::string& m) { return m.rfind(name + ": ", 0) == 0; });
    throw UsageError("--tiers asks for " + name +
                     " links, which this allocation cannot measure: " + why->substr(name.size() + 2));
  }
  return plan;
}

std::vector<double> message_sizes(bool quick) {
  std::vector<double> sizes;
  const double largest = (quick ? 4.0 : 256.0) * 1024 * 1024;
  for (double bytes = 4096; bytes <= largest; bytes *= 2) sizes.push_back(bytes);
  return sizes;
}

int message_repetitions(double bytes) {
  return bytes <= 64.0 * 1024 ? 100 : bytes <= 1024.0 * 1024 ? 20 : bytes <= 16.0 * 1024 * 1024 ? 10 : 5;
}

void CollectiveBuffers::reserve(double bytes) {
  const auto count = static_cast<size_t>(bytes / sizeof(float));
  if (count <= in_.size()) return;
  in_ = DeviceBuffer<float>();  // the old ones first: two 256 MiB pairs at once may not fit
  out_ = DeviceBuffer<float>();
  in_ = DeviceBuffer<float>(backend_, count);
  out_ = DeviceBuffer<float>(backend_, count);
  // Zeros: sums of whatever alloc left there could be denormals, which the CPU adds slowly.
  backend_.memset_zero(in_.data(), in_.bytes());
  backend_.memset_zero(out_.data(), out_.bytes());
}

double collective_bytes(CollectiveKind kind, double bytes, int n) {
  const double count = static_cast<double>(block_count(kind, bytes, n)) * sizeof(float);
  return kind == CollectiveKind::all_reduce ? count : count * n;
}

CollectiveTimes time_collective(Communicator& c, CollectiveKind kind, const std::vector<double>& sizes,
                                CollectiveBuffers& buffers, const std::function<void()>& compute) {
  const int n = c.size();
  buffers.reserve(*std::max_element(sizes.begin(), sizes.end()));
  auto call = [&](size_t count) {
    switch (kind) {
      case CollectiveKind::all_reduce:
        c.all_reduce(buffers.in(), count, ElementType::float32);
        break;
      case CollectiveKind::all_gather:
        c.all_gather(buffers.in(), buffers.out(), count, ElementType::float32);
        break;
      case CollectiveKind::reduce_scatter:
        c.reduce_scatter(buffers.in(), buffers.out(), count, ElementType::float32);
        break;
      case CollectiveKind::all_to_all:
        c.all_to_all(buffers.in(), buffers.out(), count, ElementType::float32);
        break;
      default:
        throw UsageError(std::string("calibrate does not time ") + collective_name(kind));
    }
    c.synchronize();
  };
  std::vector<size_t> counts;
  for (const double bytes : sizes) counts.push_back(block_count(kind, bytes, n));
  for (const size_t count : counts) call(count);  // untimed: connections, the first use of each size
  // The passes' CPU means, per size, beside median_over_passes's wall means.
  std::vector<std::vector<double>> cpu_passes(sizes.size());
  CollectiveTimes times;
  times.seconds = median_over_passes(sizes.size(), kTimingPasses, [&](size_t i) {
    const int repetitions = pass_repetitions(message_repetitions(sizes[i]));
    double total = 0, cpu = 0;
    for (int r = 0; r < repetitions; ++r) {
      compute();
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = process_cpu_seconds();
      call(counts[i]);
      cpu += process_cpu_seconds() - cpu_start;
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    cpu_passes[i].push_back(cpu / repetitions);
    return total / repetitions;
  });
  for (const std::vector<double>& cpu : cpu_passes) times.cpu_seconds.push_back(median(cpu));
  return times;
}

namespace {

// `round` once untimed (first use of the size), then `rounds` times: the means of the rounds'
// times, and the median of their overlap_fraction.
OverlapTimes over_rounds(int rounds, const std::function<OverlapTimes()>& round) {
  round();
  OverlapTimes t;
  std::vector<double> fractions;
  for (int i = 0; i < rounds; ++i) {
    const OverlapTimes r = round();
    fractions.push_back(overlap_fraction(r));
    t.compute_s += r.compute_s / rounds;
    t.collective_s += r.collective_s / rounds;
    t.both_s += r.both_s / rounds;
  }
  std::sort(fractions.begin(), fractions.end());
  t.hidden = fractions.empty() ? 0 : fractions[fractions.size() / 2];
  return t;
}

using Clock = WallClock;

}  // namespace

OverlapTimes time_overlap(Communicator& c, double bytes, int rounds, CollectiveBuffers& buffers,
                          const std::function<void()>& compute) {
  buffers.reserve(bytes);
  const size_t count = block_count(CollectiveKind::all_reduce, bytes, c.size());
  const auto waited = [&] {
    compute();
    c.all_reduce(buffers.in(), count, ElementType::float32);
    c.synchronize();
  };
  const auto started = [&] {
    const Communicator::Ticket ticket = c.start_all_reduce(buffers.in(), count, ElementType::float32);
    compute();
    c.finish(ticket);
    c.synchronize();
  };
  // Each of the three loops in turn, the group's ranks starting it together; per call.
  const auto timed = [&](const auto& run) {
    c.barrier();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kOverlapCalls; ++i) run();
    return seconds_since(start) / kOverlapCalls;
  };
  return over_rounds(rounds, [&] {
    OverlapTimes r;
    r.compute_s = timed(compute);
    r.collective_s = timed(waited) - r.compute_s;
    r.both_s = timed(started);
    return r;
  });
}

OverlapTimes time_sharing(Communicator& c, double bytes, int rounds, CollectiveBuffers& buffers,
                          const std::function<void()>& compute, const std::function<void()>& together) {
  buffers.reserve(bytes);
  const size_t count = block_count(CollectiveKind::all_reduce, bytes, c.size());
  // One round: the computes alone, then computes each followed by a timed all-reduce.
  return over_rounds(rounds, [&] {
    OverlapTimes t;
    together();
    Clock::time_point start = Clock::now();
    for (int i = 0; i < kSharingCalls; ++i) compute();
    t.compute_s = seconds_since(start);
    together();
    start = Clock::now();
    for (int i = 0; i < kSharingCalls; ++i) {
      compute();
      const Clock::time_point call = Clock::now();
      c.all_reduce(buffers.in(), count, ElementType::float32);
      c.synchronize();
      t.collective_s += seconds_since(call);
    }
    t.both_s = seconds_since(start);
    return t;
  });
}

std::vector<double> overlap_probe_sizes(const std::optional<ChooserInput>& job, int world) {
  if (!job) return {kDefaultOverlapSizes.begin(), kDefaultOverlapSizes.end()};
  // training.tp_chunks "auto" is decided per layout with what this probe measures: the calls
  // at one chunk, the largest the tensor all-reduces make (more chunks only make them smaller).
  ChooserInput at = *job;
  if (at.batch.tp_chunks_auto()) at.batch.tp_chunks = 1;
  double smallest = 0, largest = 0;
  for (const Layout& layout : enumerate_layouts(world)) {
    if (!divisibility_problem(at.model, at.batch, layout).empty()) continue;
    for (const CollectiveCalls& calls : predict_step_volume(at, layout).calls) {
      if (!calls.overlapped) continue;
      const auto bytes = std::max(kSmallestOverlapProbe, static_cast<double>(calls.bytes));
      smallest = smallest > 0 ? std::min(smallest, bytes) : bytes;
      largest = std::max(largest, bytes);
    }
  }
  if (largest == 0) return {kDefaultOverlapSizes.begin(), kDefaultOverlapSizes.end()};
  if (smallest == largest) return {largest};
  return {smallest, largest};
}

int overlap_gemm_count(double gemm_s, double collective_s) {
  if (!(gemm_s > 0) || !(collective_s > 0)) return 1;
  return static_cast<int>(std::clamp(std::ceil(2 * collective_s / gemm_s), 1.0, 10000.0));
}

double overlap_fraction(const OverlapTimes& t) {
  if (!(t.collective_s > 0)) return 0;
  return std::clamp((t.compute_s + t.collective_s - t.both_s) / t.collective_s, -1.0, 1.0);
}

double cores_busy_fraction(const std::vector<CollectiveSweep>& sweeps, double ranks_per_core) {
  std::vector<double> fractions;
  for (const CollectiveSweep& sweep : sweeps)
    for (size_t i = 0; i < sweep.seconds.size(); ++i)
      if (sweep.seconds[i] > 0) fractions.push_back(sweep.cpu_seconds[i] / sweep.seconds[i] * ranks_per_core);
  if (fractions.empty() || !(ranks_per_core > 0)) return 0;
  return std::clamp(median(fractions), 0.0, 1.0);
}

CollectiveSweep sweep_collective(Communicator& c, CollectiveKind kind, bool quick, CollectiveBuffers& buffers,
                                 const std::function<void()>& compute,
                                 const std::function<std::vector<double>(const std::vector<double>&)>& over_ranks) {
  CollectiveSweep sweep;
  std::vector<double> sizes = message_sizes(quick);
  for (;;) {
    // One over_ranks for both: the wall means, then the CPU means.
    CollectiveTimes mine = time_collective(c, kind, sizes, buffers, compute);
    mine.seconds.insert(mine.seconds.end(), mine.cpu_seconds.begin(), mine.cpu_seconds.end());
    const std::vector<double> medians = over_ranks(mine.seconds);
    for (size_t i = 0; i < sizes.size(); ++i) {
      sweep.bytes.push_back(collective_bytes(kind, sizes[i], c.size()));
      sweep.seconds.push_back(medians[i]);
      sweep.cpu_seconds.push_back(medians[sizes.size() + i]);
    }
    const double largest = sizes.back();
    if (sweep.seconds.back() >= 2 * sweep.seconds.front() || largest >= kLargestMessage) return sweep;
    sizes = {2 * largest};
  }
}

}  // namespace axonn
