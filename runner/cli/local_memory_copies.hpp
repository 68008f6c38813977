#pragma once
// What `axonn run` does with its pretend nodes' memory copies (checkpoint.memory_interval,
// trainer/train/memory_copies.hpp), which all live on this machine, one directory per pretend
// node: a lost node's copies are deleted (its memory is gone with it, as a real node's would
// be), the nodes left take their copies to the names they have in the next attempt, and the
// job's copies go when the launcher ends.
#include <filesystem>
#include <string>

#include "config/job_config.hpp"
#include "runner/pmix/local_launcher.hpp"
#include "runner/pmix/restart_plan.hpp"

namespace axonn {

class LocalMemoryCopies {
 public:
  // `job`: a training job's config (nullptr: not a training run, nothing to keep).
  explicit LocalMemoryCopies(const JobConfig* job);
  ~LocalMemoryCopies();
  LocalMemoryCopies(const LocalMemoryCopies&) = delete;
  LocalMemoryCopies& operator=(const LocalMemoryCopies&) = delete;

  // "AXONN_MEMORY_KEY=local-<pid>" for the ranks' environment: the same in every attempt.
  std::string environment() const;
  // Before `next` starts after `plan`: the lost nodes' copies deleted, the others renamed.
  void follow(const RestartPlan& plan, const LocalJobOptions& next) const;

 private:
  std::string key_;
  std::filesystem::path job_dir_;  // empty: no memory copies
};

}  // namespace axonn
