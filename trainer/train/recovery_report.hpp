#pragma once
// A restarted run's account of its recovery: from the moment its launcher saw the failure to
// this run's first completed step, phase by phase, and how many steps it does again. The
// launcher hands the two times it knows in AXONN_RECOVERY ("FAILED_UNIX ENDED_UNIX", wall
// clock seconds) and the restart count in AXONN_RESTART; the rest is this run's startup:
//
//   failure seen ──stop──> last rank gone ──restart──> process start ──start-up──> communicators
//     ──load──> checkpoint loaded ──first step──> first step done
//
// The failure is the earlier of the launcher's time and the first note a rank of the failed
// attempt left when it found the run failed (note_failure): a local launcher sees a rank's
// exit at once, but an sbatch template sees only the failed srun step's end, which comes
// seconds after the survivors noticed a lost node (srun waits for the node's tasks).
//
// stop: the failed attempt's other ranks noticed (a collective with a dead peer fails at once)
// and exited; restart: the launcher's decision and the new processes' fork and exec;
// start-up: PMIx, topology, layout, data and the communicators' rendezvous; load: the model's
// set-up and the checkpoint read (resharded to this run's layout).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/train/startup_times.hpp"

namespace axonn {

struct RecoveryTimes {
  int restart = 0;                // 1 for a job's first restart
  double failed_unix_s = 0;       // the launcher saw the failure, or a rank noticed it first
  double ended_unix_s = 0;        // the failed attempt's last rank had exited
  std::optional<int> noticed_by;  // the rank whose note (below) is the failure's time
};

// A rank whose run failed notes when, in <run_dir>/failures/rank-NNNNN (wall clock seconds;
// never throws: it is called on the way out of a failure).
void note_failure(const std::filesystem::path& run_dir, int rank);

struct FailureNote {
  double unix_s = 0;
  int rank = 0;
};
// The earliest note a failed attempt left, and removes them all (rank 0, as a run starts).
std::optional<FailureNote> take_failure_notes(const std::filesystem::path& run_dir);

// `times` with the failure at the note when a rank noticed it before the launcher saw it.
RecoveryTimes with_failure_note(RecoveryTimes times, const std::optional<FailureNote>& note);

// From AXONN_RESTART and AXONN_RECOVERY; nullopt when this run is no restart (either unset,
// or a restart count of 0). Throws ConfigError naming the variable for a value it cannot read.
std::optional<RecoveryTimes> recovery_times_from_environment();

struct RecoveryReport {
  int restart = 0;
  double failed_unix_s = 0;                            // when the launcher saw the failure, or a rank noticed it
  std::optional<int> noticed_by;                       // that rank
  double total_s = 0;                                  // failure seen -> first step done
  std::vector<std::pair<std::string, double>> phases;  // stop, restart, startup, load, first_step: seconds each
  int64_t resumed_step = 0;
  std::optional<int64_t> steps_redone;  // the last step the failed attempt logged, minus resumed_step
};

// `startup` must have marked communicators, checkpoint_loaded and first_step.
// `last_logged_step`: the newest step metrics.jsonl held before this run appended to it.
RecoveryReport recovery_report(const RecoveryTimes& times, const StartupTimes& startup, int64_t resumed_step,
                               std::optional<int64_t> last_logged_step);

// "restart 1: 3.21 s from the failure to the first step (stop 0.05 s, restart 0.31 s, ...);
// resumed from step 4, 1 step(s) done again"; "from the failure (noticed by rank 2)" when a
// rank's note dates it.
std::string describe_recovery(const RecoveryReport& report);

// {"restart": 1, "total_s": ..., "failed_unix_s": ..., ["noticed_by_rank": 2,] "stop_s": ..., ...,
//  "resumed_step": 4, "steps_redone": 1}
std::string recovery_json(const RecoveryReport& report);

}  // namespace axonn
