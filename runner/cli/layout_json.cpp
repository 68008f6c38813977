#include "runner/cli/layout_json.hpp"

#include <toml++/toml.h>

#include <sstream>

#include "layout/comm_overlap.hpp"

namespace axonn {
namespace {

toml::table candidate_json(const ChooserInput& input, const Candidate& c, double usable_bytes) {
  toml::table axes;
  for (int a = 0; a < kCommAxisCount; ++a) {
    const auto axis = static_cast<CommAxis>(a);
    if (c.volume.group_size[static_cast<size_t>(a)] <= 1) continue;
    toml::table kinds;
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const auto kind = static_cast<CollectiveKind>(k);
      const CollectiveVolume& v = c.volume.at(axis, kind);
      if (v.calls == 0) continue;
      kinds.insert(collective_name(kind), toml::table{{"calls", v.calls}, {"bytes", v.bytes}});
    }
    axes.insert(comm_axis_name(axis), toml::table{{"group_size", c.volume.group_size[static_cast<size_t>(a)]},
                                                  {"link", link_tier_name(c.cost.link[static_cast<size_t>(a)])},
                                                  {"time_s", c.cost.comm_s[static_cast<size_t>(a)]},
                                                  {"overlapped_time_s", c.cost.overlapped_axis_s[static_cast<size_t>(a)]},
                                                  {"hidden_time_s", c.cost.hidden_axis_s[static_cast<size_t>(a)]},
                                                  {"bytes", c.volume.bytes(axis)},
                                                  {"collectives", std::move(kinds)}});
  }
  return toml::table{
      {"layout", format_layout(c.layout)},
      {"order", format_order(c.layout)},
      {"step_time_s", c.cost.step_s()},
      {"compute_time_s", c.cost.compute_s},
      {"comm_time_s", c.cost.comm_total_s()},
      {"hidden_comm_time_s", c.cost.hidden_s},
      {"filled_comm_time_s", c.cost.filled_s},
      {"busy_comm_time_s", c.cost.busy_s},
      {"flops_per_rank", c.cost.flops},
      {"recompute", recompute_name(c.recompute)},
      {"recompute_flops_per_rank", c.cost.recompute_flops},
      {"shard_optimizer", c.shard_optimizer},
      {"overlap_comm", overlaps_comm(input, c.layout)},
      {"tp_chunks", c.tp_chunks},
      {"overlap_reason", overlap_reason(input, c.layout)},
      {"memory_bytes", c.memory.total()},
      {"memory_headroom_fraction", 1.0 - static_cast<double>(c.memory.total()) / usable_bytes},
      {"axes", std::move(axes)},
      {"why_lost", c.why_lost},
  };
}

}  // namespace

std::string layout_result_json(const ChooserResult& r, int top_k, const std::string& no_fit_change,
                               const std::string& ranks_from) {
  const double usable = usable_memory(r.input.machine);
  toml::array ranked, rejected;
  for (size_t i = 0; i < r.ranked.size() && i < static_cast<size_t>(top_k); ++i)
    ranked.push_back(candidate_json(r.input, r.ranked[i], usable));
  for (const auto& rej : r.rejected)
    rejected.push_back(toml::table{{"layout", format_layout(rej.layout)}, {"reason", rej.reason}});
  toml::table root{
      {"world", r.input.world()}, {"nodes", r.input.machine.nodes}, {"gpus_per_node", r.input.machine.tasks_per_node},
      {"fits", r.fits()},         {"ranked", std::move(ranked)},    {"rejected", std::move(rejected)},
  };
  if (r.fits()) root.insert("best", format_layout_with_order(r.best().layout));
  if (!no_fit_change.empty()) root.insert("smallest_change", no_fit_change);
  if (!ranks_from.empty()) root.insert("ranks_from", ranks_from);
  std::ostringstream out;
  out << toml::json_formatter{root} << "\n";
  return out.str();
}

}  // namespace axonn
