#include "runner/cli/local_memory_copies.hpp"

#include <unistd.h>

#include <system_error>

#include "runner/pmix/pretend_nodes.hpp"
#include "trainer/train/memory_copies.hpp"

namespace fs = std::filesystem;

namespace axonn {

LocalMemoryCopies::LocalMemoryCopies(const JobConfig* job) : key_("local-" + std::to_string(getpid())) {
  if (job != nullptr && job->checkpoint.memory_copies())
    job_dir_ = memory_job_dir(job->checkpoint.memory_dir, key_, job->checkpoint.dir);
}

LocalMemoryCopies::~LocalMemoryCopies() {
  if (job_dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(job_dir_, ec);
}

std::string LocalMemoryCopies::environment() const { return "AXONN_MEMORY_KEY=" + key_; }

void LocalMemoryCopies::follow(const RestartPlan& plan, const LocalJobOptions& next) const {
  if (job_dir_.empty() || plan.lost_hosts.empty()) return;
  std::error_code ec;
  for (const std::string& host : plan.lost_hosts) fs::remove_all(job_dir_ / host, ec);
  // Through temporary names: a node left may take a name another one has now.
  const std::vector<PretendNode> nodes =
      pretend_nodes(next.ranks, next.nodes_sim, next.hostname.empty() ? this_hostname() : next.hostname);
  for (size_t i = 0; i < plan.kept_hosts.size() && i < nodes.size(); ++i)
    fs::rename(job_dir_ / plan.kept_hosts[i], job_dir_ / (".moving-" + std::to_string(i)), ec);
  for (size_t i = 0; i < plan.kept_hosts.size() && i < nodes.size(); ++i)
    fs::rename(job_dir_ / (".moving-" + std::to_string(i)), job_dir_ / nodes[i].hostname, ec);
}

}  // namespace axonn
