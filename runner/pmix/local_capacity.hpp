#pragma once
// Whether this machine can hold the N ranks of `axonn run -n N`, decided before anything
// starts from the limits that would otherwise stop the job halfway through its start (or
// make it swap, and take minutes to stop):
//   - memory: MemAvailable (/proc/meminfo) against N times what one rank needs at least
//     (kMinRankBytes: the resident size of an idle rank, libraries and PMIx client);
//   - processes: every rank is a process with threads (kMinRankThreads), counted against
//     RLIMIT_NPROC of this user (not enforced for root) and the kernel's threads-max and
//     pid_max, less the tasks that already run;
//   - open files: the launcher holds per rank its stdout and stderr pipes and the PMIx
//     server's connection to it (kLauncherFilesPerRank), against RLIMIT_NOFILE's hard
//     limit; the soft limit is raised to what the job needs.
#include <cstdint>
#include <optional>
#include <string>

namespace axonn {

// An `axonn selftest` or tiny-job `axonn train` rank on the CUDA build, measured: 5 threads,
// ~96 MiB of private memory (170 MiB resident with the shared libraries), 24 open files.
// The memory minimum stays below that, so only a job that cannot fit is refused.
inline constexpr uint64_t kMinRankBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMinRankThreads = 5;
inline constexpr uint64_t kLauncherFilesPerRank = 3;
inline constexpr uint64_t kLauncherFilesReserve = 64;  // the launcher's own: PMIx server, logs, libraries

struct MachineLimits {
  std::optional<uint64_t> memory_available_bytes;  // MemAvailable; nullopt when /proc/meminfo says nothing
  std::optional<uint64_t> user_tasks_limit;        // RLIMIT_NPROC where enforced (not root, not unlimited)
  uint64_t user_tasks = 0;                         // threads this user runs now
  std::optional<uint64_t> kernel_tasks_limit;      // min(threads-max, pid_max)
  uint64_t kernel_tasks = 0;                       // threads running now (/proc/loadavg)
  std::optional<uint64_t> open_files_limit;        // RLIMIT_NOFILE hard; nullopt when unlimited
};

MachineLimits read_machine_limits();

// The first limit that `ranks` ranks exceed, as one line naming the limit, what the ranks
// need, what the machine has and the fix; nullopt when they fit.
std::optional<std::string> local_capacity_problem(int ranks, const MachineLimits& limits);

// Raises this process's soft RLIMIT_NOFILE, up to the hard limit, to what a launcher of
// `ranks` ranks holds open (the ranks inherit it).
void raise_open_file_limit(int ranks);

}  // namespace axonn
