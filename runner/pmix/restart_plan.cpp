#include "runner/pmix/restart_plan.hpp"

#include <signal.h>

#include <algorithm>

#include "core/exit_codes.hpp"
#include "runner/pmix/pretend_nodes.hpp"

namespace axonn {
namespace {

// Killed from outside: SIGKILL, and not the launcher's own (after the grace period, or a
// stopped rank it put down).
bool killed_from_outside(const RankExit& e) { return e.signal == SIGKILL && !e.killed_by_launcher; }

std::string rank_span(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks.front());
  return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
}

std::string plural(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

RestartPlan plan_restart(const LocalJobOptions& attempt, const LocalJobResult& result, int restarts_done,
                         int max_restarts) {
  RestartPlan plan;
  if (result.failure.empty()) return plan;  // success, or every rank saved and stopped (75)
  if (result.interrupted) {
    plan.why = "the launcher was asked to stop";
    return plan;
  }
  if (result.exit_code == exit_code::bad_input || result.exit_code == exit_code::no_layout) {
    plan.why = "exit " + std::to_string(result.exit_code) + " (" +
               (result.exit_code == exit_code::bad_input ? "bad input" : "no layout fits") +
               ") would end the next attempt the same way";
    return plan;
  }
  if (restarts_done >= max_restarts) {
    plan.why =
        "restart limit " + std::to_string(max_restarts) + " reached (--max-restarts, else the job's run.max_restarts)";
    return plan;
  }

  const std::vector<PretendNode> nodes =
      pretend_nodes(attempt.ranks, attempt.nodes_sim, attempt.hostname.empty() ? this_hostname() : attempt.hostname);
  std::vector<const PretendNode*> lost;
  for (const PretendNode& node : nodes)
    if (std::all_of(node.ranks.begin(), node.ranks.end(),
                    [&](int r) { return killed_from_outside(result.exits[static_cast<size_t>(r)]); }))
      lost.push_back(&node);
  plan.restart = true;
  plan.ranks = attempt.ranks;
  plan.nodes_sim = attempt.nodes_sim;
  if (lost.empty() || lost.size() == nodes.size()) {
    plan.why = "restarting all " + plural(attempt.ranks, "rank");
    return plan;
  }
  for (const PretendNode& node : nodes)
    (std::find(lost.begin(), lost.end(), &node) != lost.end() ? plan.lost_hosts : plan.kept_hosts)
        .push_back(node.hostname);
  std::string names;
  for (const PretendNode* node : lost) {
    names += (names.empty() ? "" : ", ") + node->hostname + " (" + rank_span(node->ranks) + ")";
    plan.ranks -= static_cast<int>(node->ranks.size());
  }
  plan.nodes_sim -= static_cast<int>(lost.size());
  plan.why = "pretend node" + std::string(lost.size() == 1 ? " " : "s ") + names +
             (lost.size() == 1 ? " was" : " were") + " lost: restarting " + plural(plan.ranks, "rank") + " on " +
             plural(plan.nodes_sim, "pretend node");
  return plan;
}

}  // namespace axonn
