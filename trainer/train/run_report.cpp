#include "trainer/train/run_report.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "core/json_text.hpp"

namespace axonn {
namespace {

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

// "z.all_gather": an (axis, kind) as summary.json names it.
std::string comm_key(int axis, int kind) {
  return comm_axis_name(static_cast<CommAxis>(axis)) + "." + collective_name(static_cast<CollectiveKind>(kind));
}

}  // namespace

std::vector<std::pair<std::string, double>> comm_seconds_per_step(const CommCounters& counted, int64_t steps) {
  std::vector<std::pair<std::string, double>> out;
  if (steps <= 0) return out;
  for (int a = 0; a < kCommAxisCount; ++a)
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const CollectiveCount& c = counted[static_cast<size_t>(a)][static_cast<size_t>(k)];
      if (c.calls > 0)
        out.emplace_back(comm_key(a, k), std::chrono::duration<double>(c.time).count() / static_cast<double>(steps));
    }
  return out;
}

std::vector<std::string> comm_mismatches(const CommCounters& counted, const StepVolume& per_step, int64_t steps) {
  std::vector<std::string> out;
  for (int a = 0; a < kCommAxisCount; ++a)
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const auto kind = static_cast<CollectiveKind>(k);
      if (kind == CollectiveKind::barrier) continue;  // synchronisation, not part of the plan
      const CollectiveCount& c = counted[static_cast<size_t>(a)][static_cast<size_t>(k)];
      const CollectiveVolume& p = per_step.at(static_cast<CommAxis>(a), kind);
      const bool bytes_match = per_step.varies(static_cast<CommAxis>(a), kind) || c.bytes == p.bytes * steps;
      if (bytes_match && c.calls == p.calls * steps) continue;
      out.push_back(comm_axis_name(static_cast<CommAxis>(a)) + " " + collective_name(kind) + ": counted " +
                    std::to_string(c.bytes) + " bytes in " + std::to_string(c.calls) + " calls, predicted " +
                    std::to_string(p.bytes * steps) + " in " + std::to_string(p.calls * steps));
    }
  return out;
}

std::vector<std::pair<CommAxis, CollectiveKind>> routing_entries(const StepVolume& per_step) {
  std::vector<std::pair<CommAxis, CollectiveKind>> out;
  for (int a = 0; a < kCommAxisCount; ++a)
    for (int k = 0; k < kCollectiveKindCount; ++k)
      if (per_step.varies(static_cast<CommAxis>(a), static_cast<CollectiveKind>(k)))
        out.emplace_back(static_cast<CommAxis>(a), static_cast<CollectiveKind>(k));
  return out;
}

std::string routing_mismatch(CommAxis axis, CollectiveKind kind, int64_t world_bytes, const StepVolume& per_step,
                             int64_t steps, int world) {
  const int64_t predicted = per_step.at(axis, kind).bytes * steps;
  if (world_bytes == predicted * world) return "";
  return comm_axis_name(axis) + " " + collective_name(kind) + ": counted " + std::to_string(world_bytes) +
         " bytes over the " + std::to_string(world) + " ranks, predicted " + std::to_string(predicted * world) + " (" +
         std::to_string(world) + " x " + std::to_string(predicted) + ")";
}

std::string comm_summary(const StepVolume& v) {
  std::string s;
  for (int a = 0; a < kCommAxisCount; ++a) {
    std::string line;
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const CollectiveVolume& p = v.at(static_cast<CommAxis>(a), static_cast<CollectiveKind>(k));
      if (p.calls == 0) continue;
      line += std::string(line.empty() ? "" : ", ") + collective_name(static_cast<CollectiveKind>(k)) + " " +
              mib(static_cast<double>(p.bytes)) + " (" + std::to_string(p.calls) + " calls)";
    }
    if (!line.empty()) s += (s.empty() ? "" : "; ") + comm_axis_name(static_cast<CommAxis>(a)) + ": " + line;
  }
  return s.empty() ? "none (one rank)" : s;
}

std::array<int64_t, kCommAxisCount> counted_bytes_per_axis(const CommCounters& counted) {
  std::array<int64_t, kCommAxisCount> bytes{};
  for (size_t a = 0; a < counted.size(); ++a)
    for (const CollectiveCount& c : counted[a]) bytes[a] += c.bytes;
  return bytes;
}

std::string tier_summary(const TierBytes& counted, const TierBytes& predicted, int64_t steps) {
  std::string s;
  for (size_t t = 0; t < counted.size(); ++t) {
    if (counted[t] == 0 && predicted[t] == 0) continue;
    const double per_step = steps > 0 ? static_cast<double>(counted[t]) / static_cast<double>(steps) : 0;
    s += (s.empty() ? "" : ", ") + std::string(link_tier_name(static_cast<LinkTier>(t))) + " " + mib(per_step) +
         " (predicted " + mib(static_cast<double>(predicted[t])) + ")";
  }
  return s.empty() ? "none (one rank)" : s;
}

void write_run_summary(const std::filesystem::path& path, const RunSummary& r) {
  std::string j = "{\n";
  j += "  \"layout\": " + json_string(r.layout) + ",\n";
  j += "  \"layout_origin\": " + json_string(r.layout_origin) + ",\n";
  j += "  \"recompute\": " + json_string(r.recompute) + ",\n";
  j += "  \"shard_optimizer\": " + std::string(r.shard_optimizer ? "true" : "false") + ",\n";
  if (r.moe_rounds) j += "  \"moe_rounds\": " + std::to_string(*r.moe_rounds) + ",\n";
  j += "  \"start_step\": " + std::to_string(r.start_step) + ",\n";
  j += "  \"end_step\": " + std::to_string(r.end_step) + ",\n";
  j += "  \"preempted\": " + std::string(r.preempted ? "true" : "false") + ",\n";
  j += "  \"last_loss\": " + json_number(r.last_loss) + ",\n";
  j += "  \"tokens_per_s\": " + json_number(r.tokens_per_s) + ",\n";
  j += "  \"mfu\": " + json_number(r.mfu) + ",\n";
  j += "  \"step_s_median\": " + json_number(r.step_s_median) + ",\n";
  j += "  \"predicted_step_s\": " + json_number(r.predicted_step_s) + ",\n";
  j += "  \"step_time_ratio\": " + json_number(r.step_time_ratio) + ",\n";
  j += "  \"comm_bytes_match\": " + std::string(r.comm_bytes_match ? "true" : "false") + ",\n";
  j += "  \"comm_mismatches\": [";
  for (size_t i = 0; i < r.comm_mismatches.size(); ++i) j += (i ? ", " : "") + json_string(r.comm_mismatches[i]);
  j += "],\n  \"predicted_bytes_per_step\": {";
  bool first = true;
  for (int a = 0; a < kCommAxisCount; ++a)
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      const CollectiveVolume& p = r.predicted_per_step.at(static_cast<CommAxis>(a), static_cast<CollectiveKind>(k));
      if (p.calls == 0) continue;
      j += std::string(first ? "" : ", ") + json_string(comm_key(a, k)) + ": " + std::to_string(p.bytes);
      first = false;
    }
  // Per step: what the tiers carried on rank 0, counted and predicted.
  j += "},\n  \"bytes_per_tier_per_step\": {";
  first = true;
  for (size_t t = 0; t < r.counted_per_tier.size(); ++t) {
    if (r.counted_per_tier[t] == 0 && r.predicted_per_tier[t] == 0) continue;
    const double counted =
        r.steps_run > 0 ? static_cast<double>(r.counted_per_tier[t]) / static_cast<double>(r.steps_run) : 0;
    j += std::string(first ? "" : ", ") + json_string(link_tier_name(static_cast<LinkTier>(t))) +
         ": {\"counted\": " + json_number(counted) + ", \"predicted\": " + std::to_string(r.predicted_per_tier[t]) +
         "}";
    first = false;
  }
  j += "},\n  \"comm_seconds_per_step\": {";
  for (size_t i = 0; i < r.comm_s_per_step.size(); ++i)
    j += (i ? ", " : "") + json_string(r.comm_s_per_step[i].first) + ": " + json_number(r.comm_s_per_step[i].second);
  j += "},\n  \"comm_profile\": " + comm_profile_json(r.comm_profile);
  j += ",\n  \"model_memory_bytes\": [";
  for (size_t i = 0; i < r.model_memory_bytes.size(); ++i) j += (i ? ", " : "") + json_number(r.model_memory_bytes[i]);
  j += "],\n  \"predicted_memory_bytes\": [";
  for (size_t i = 0; i < r.predicted_memory_bytes.size(); ++i)
    j += (i ? ", " : "") + json_number(r.predicted_memory_bytes[i]);
  // Wall clock to the microsecond (%.9g would round it to whole seconds), for comparing with
  // the moment a launcher was started (bench/launch.cpp).
  char start[32];
  std::snprintf(start, sizeof start, "%.6f", r.process_start_unix_s);
  j += "],\n  \"startup\": {\"process_start_unix_s\": " + std::string(start);
  for (const auto& [phase, seconds] : r.startup_s) j += ", " + json_string(phase + "_s") + ": " + json_number(seconds);
  j += "}";
  if (r.recovery) j += ",\n  \"recovery\": " + recovery_json(*r.recovery);
  j += "\n}\n";

  std::filesystem::create_directories(path.parent_path());
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << j;
    if (!out) throw std::runtime_error("cannot write " + tmp.string() + " (is run.dir writable?)");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace axonn
