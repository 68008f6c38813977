#include "runner/pmix/local_capacity.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace axonn {
namespace {

std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

std::optional<uint64_t> mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    uint64_t kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %" SCNu64 " kB", &kib) == 1) return kib * 1024;
  }
  return std::nullopt;
}

// Threads (tasks) of every process whose real uid is `uid`: what RLIMIT_NPROC counts.
uint64_t tasks_of_user(uid_t uid) {
  uint64_t tasks = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    std::ifstream in(entry.path() / "status");
    bool mine = false;
    for (std::string line; std::getline(in, line);) {
      unsigned long real = 0, threads = 0;
      if (std::sscanf(line.c_str(), "Uid: %lu", &real) == 1) mine = real == uid;
      if (std::sscanf(line.c_str(), "Threads: %lu", &threads) == 1 && mine) tasks += threads;
    }
  }
  return tasks;
}

// The 4th field of /proc/loadavg, "running/total": every thread on the machine.
uint64_t kernel_tasks_now() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c, tasks;
  in >> a >> b >> c >> tasks;
  const size_t slash = tasks.find('/');
  return slash == std::string::npos ? 0 : std::strtoull(tasks.c_str() + slash + 1, nullptr, 10);
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

uint64_t launcher_files(int ranks) {
  return kLauncherFilesPerRank * static_cast<uint64_t>(ranks) + kLauncherFilesReserve;
}

}  // namespace

MachineLimits read_machine_limits() {
  MachineLimits m;
  m.memory_available_bytes = mem_available_bytes();
  rlimit nproc{};
  // The kernel does not enforce RLIMIT_NPROC for root.
  if (getuid() != 0 && getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY) {
    m.user_tasks_limit = nproc.rlim_cur;
    m.user_tasks = tasks_of_user(getuid());
  }
  const auto threads_max = read_number("/proc/sys/kernel/threads-max");
  const auto pid_max = read_number("/proc/sys/kernel/pid_max");
  if (threads_max && pid_max) m.kernel_tasks_limit = std::min(*threads_max, *pid_max);
  m.kernel_tasks = kernel_tasks_now();
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_max != RLIM_INFINITY) m.open_files_limit = files.rlim_max;
  return m;
}

std::optional<std::string> local_capacity_problem(int ranks, const MachineLimits& m) {
  const auto n = static_cast<uint64_t>(ranks);
  const std::string what =
      "-n " + std::to_string(ranks) + ": this machine cannot hold " + std::to_string(ranks) + " ranks: ";
  const std::string fix = "; use fewer ranks (-n), or more machines under Slurm (srun --mpi=pmix)";
  if (m.memory_available_bytes && n * kMinRankBytes > *m.memory_available_bytes)
    return what + "they need at least " + mib(n * kMinRankBytes) + " of memory (" + mib(kMinRankBytes) +
           " per rank before any model) and " + mib(*m.memory_available_bytes) + " is available (MemAvailable)" + fix +
           " (at most " + std::to_string(*m.memory_available_bytes / kMinRankBytes) + " here)";
  if (m.user_tasks_limit && m.user_tasks + n * kMinRankThreads > *m.user_tasks_limit)
    return what + "they start at least " + std::to_string(n * kMinRankThreads) + " threads (" +
           std::to_string(kMinRankThreads) + " per rank) and this user runs " + std::to_string(m.user_tasks) +
           " of the " + std::to_string(*m.user_tasks_limit) + " its process limit allows (RLIMIT_NPROC, ulimit -u)" +
           fix + " or raise `ulimit -u`";
  if (m.kernel_tasks_limit && m.kernel_tasks + n * kMinRankThreads > *m.kernel_tasks_limit)
    return what + "they start at least " + std::to_string(n * kMinRankThreads) + " threads (" +
           std::to_string(kMinRankThreads) + " per rank) and " + std::to_string(m.kernel_tasks) + " of the " +
           std::to_string(*m.kernel_tasks_limit) +
           " the kernel allows run already (kernel.threads-max, kernel.pid_max)" + fix;
  if (m.open_files_limit && launcher_files(ranks) > *m.open_files_limit)
    return what + "the launcher holds " + std::to_string(kLauncherFilesPerRank) +
           " files per rank open (its stdout and stderr pipes, the PMIx server's connection), " +
           std::to_string(launcher_files(ranks)) + " in all, and the open-file limit is " +
           std::to_string(*m.open_files_limit) + " (RLIMIT_NOFILE hard limit, ulimit -Hn)" + fix +
           " or raise `ulimit -Hn`";
  return std::nullopt;
}

void raise_open_file_limit(int ranks) {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return;
  const uint64_t need = launcher_files(ranks);
  if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < need) {
    files.rlim_cur = files.rlim_max == RLIM_INFINITY ? need : std::min<uint64_t>(need, files.rlim_max);
    setrlimit(RLIMIT_NOFILE, &files);
  }
}

}  // namespace axonn
