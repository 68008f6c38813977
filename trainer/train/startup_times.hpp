#pragma once
// When one rank reached each phase of its startup, in seconds since its process was created
// (the fork, from /proc/self/stat), so the time a launcher spends before main() - exec, the
// dynamic loader - counts as the launcher's, not the trainer's. `axonn train` marks PMIx,
// topology, layout and communicators; run_training marks the model, the checkpoint load and
// the first step. Rank 0 logs them and writes them to summary.json ("startup"), where
// bench/launch.cpp reads them beside the wall clock at which it started srun.
#include <string>
#include <utility>
#include <vector>

namespace axonn {

class StartupTimes {
 public:
  // Reads this process's creation time; /proc/self/stat's start time has clock-tick
  // resolution (10 ms on Linux). Without /proc, the origin is the time of this call.
  static StartupTimes since_process_start();

  // Records `phase` at the current time (seconds since process start).
  void mark(const std::string& phase);

  double process_start_unix_s() const { return process_start_unix_s_; }  // wall clock (CLOCK_REALTIME)
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  // "pmix_init 0.012 s, topology 0.031 s, ..." in the order marked.
  std::string describe() const;

 private:
  double process_start_unix_s_ = 0;
  double process_start_boot_s_ = 0;  // CLOCK_BOOTTIME, the clock /proc/self/stat counts in
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace axonn
