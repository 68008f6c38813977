#include "layout/layout_report.hpp"

#include <cstdio>
#include <map>

#include "layout/model_plan.hpp"

namespace axonn {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

std::string mib(int64_t bytes) { return fmt("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

// "812 KiB", "3.4 MiB", "71.20 GiB"
std::string human_bytes(double bytes) {
  if (bytes < 1024.0 * 1024.0) return fmt("%.0f KiB", bytes / 1024.0);
  if (bytes < 1024.0 * 1024.0 * 1024.0) return fmt("%.1f MiB", bytes / (1024.0 * 1024.0));
  return fmt("%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

std::string format_ranked_table(const ChooserResult& r, int top_k) {
  std::string s;
  s += pad("#", 3) + pad("layout", 12) + pad("order", 6) + pad("step ms", 11) + pad("compute", 10);
  for (int a = 0; a < kCommAxisCount; ++a) s += pad(comm_axis_name(static_cast<CommAxis>(a)) + " ms/MiB", 17);
  s += pad("memory", 11) + pad("free", 6) + "\n";
  const double usable = usable_memory(r.input.machine);
  const size_t n = std::min(r.ranked.size(), static_cast<size_t>(std::max(top_k, 1)));
  for (size_t i = 0; i < n; ++i) {
    const Candidate& c = r.ranked[i];
    s += pad(std::to_string(i + 1), 3) + pad(format_layout(c.layout), 12) + pad(format_order(c.layout), 6) +
         pad(fmt("%.3f", c.cost.step_s() * 1e3), 11) + pad(fmt("%.3f", c.cost.compute_s * 1e3), 10);
    for (int a = 0; a < kCommAxisCount; ++a) {
      const auto axis = static_cast<CommAxis>(a);
      const std::string cell = c.volume.group_size[static_cast<size_t>(a)] > 1
                                   ? fmt("%.3f", c.cost.comm_s[static_cast<size_t>(a)] * 1e3) + "/" +
                                         mib(c.volume.bytes(axis))
                                   : "-";
      s += pad(cell, 17);
    }
    const double used = static_cast<double>(c.memory.total());
    s += pad(human_bytes(used), 11) + pad(fmt("%.0f%%", 100.0 * (1.0 - used / usable)), 6) + "\n";
  }
  if (r.ranked.size() > n) s += "   ... " + std::to_string(r.ranked.size() - n) + " more (--top K)\n";
  return s;
}

std::string format_explain(const ChooserResult& r, int top_k) {
  std::string s;
  const ChooserInput& in = r.input;
  s += "job: " + std::to_string(in.model.layers) + " layers, hidden " + std::to_string(in.model.hidden) + ", " +
       std::to_string(in.model.heads) + " heads, vocab " + std::to_string(in.model.vocab) + ", sequence " +
       std::to_string(in.model.sequence) + " (" + fmt("%.1f", static_cast<double>(parameters_total(in.model)) / 1e6) +
       "M parameters); global batch " + std::to_string(in.batch.global_batch) + ", micro-batch <= " +
       std::to_string(in.batch.micro_batch) + ", " + element_type_name(in.batch.dtype) + "\n";
  s += "machine: " + std::to_string(in.machine.nodes) + " nodes x " + std::to_string(in.machine.tasks_per_node) +
       " GPUs; peak " + fmt("%.3g", in.machine.peak_flops) + " FLOP/s x efficiency " +
       fmt("%.2f", in.machine.compute_efficiency) + "; links intra " +
       fmt("%.3g", in.machine.intra_node.bandwidth_bytes_per_s) + " B/s, inter " +
       fmt("%.3g", in.machine.inter_node.bandwidth_bytes_per_s) + " B/s\n";
  s += "cost model: step = compute + sum over collectives of calls*ring_steps*alpha + bus_factor*bytes/beta,\n"
       "  beta and alpha of the slowest link the group spans; no overlap assumed\n\n";
  if (r.fits()) {
    const Candidate& best = r.best();
    s += "best: " + format_layout_with_order(best.layout) + " (rank order fastest first: " + format_order(best.layout) +
         ")\n";
    for (int a = 0; a < kCommAxisCount; ++a) {
      if (best.volume.group_size[static_cast<size_t>(a)] <= 1) continue;
      s += "  " + pad(comm_axis_name(static_cast<CommAxis>(a)), 5) + " groups of " +
           std::to_string(best.volume.group_size[static_cast<size_t>(a)]) + " over " +
           link_tier_name(best.cost.link[static_cast<size_t>(a)]) + " links\n";
    }
    s += '\n';
    s += memory_formula(in, best.layout);
    s += '\n';
    const size_t n = std::min(r.ranked.size(), static_cast<size_t>(std::max(top_k, 1)));
    if (n > 1) s += "runner-ups:\n";
    for (size_t i = 1; i < n; ++i)
      s += "  " + format_layout_with_order(r.ranked[i].layout) + ": " + r.ranked[i].why_lost + "\n";
  }
  if (!r.rejected.empty()) {
    std::map<std::string, std::vector<std::string>> by_reason;
    for (const auto& rej : r.rejected) by_reason[rej.reason].push_back(format_layout(rej.layout));
    s += "rejected (" + std::to_string(r.rejected.size()) + " size tuples, every axis order each):\n";
    for (const auto& [reason, layouts] : by_reason) {
      s += "  " + reason + ": ";
      for (size_t i = 0; i < layouts.size() && i < 12; ++i) s += (i ? ", " : "") + layouts[i];
      if (layouts.size() > 12) s += ", ... (" + std::to_string(layouts.size()) + " in all)";
      s += "\n";
    }
  }
  return s;
}

}  // namespace axonn
