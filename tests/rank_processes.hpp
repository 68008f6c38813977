#pragma once
// The processes of a local job's ranks, for tests and benchmarks that kill them as a failure
// would: found in /proc by their working directory (the job's folder), their PMIx rank and
// the launcher's attempt (AXONN_RESTART), since every rank runs the same command line.
#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace axonn::test {

// A whole file ("" when it cannot be read); the tests read their runs' files with it too.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// `entry` ("KEY=VALUE") is one of the NUL-separated entries of a /proc/PID/environ block.
inline bool environment_has(const std::string& environ_block, const std::string& entry) {
  const std::string whole = entry + '\0';
  return environ_block.rfind(whole, 0) == 0 || environ_block.find('\0' + whole) != std::string::npos;
}

// The pids of attempt `attempt` of the `ranks` of the `axonn train` job running in `dir`.
inline std::vector<pid_t> rank_pids(const std::filesystem::path& dir, const std::vector<int>& ranks, int attempt) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path() / "cwd", ec) != dir || ec) continue;
    const std::string env = read_text(entry.path() / "environ");
    const std::string cmdline = read_text(entry.path() / "cmdline");
    if (!environment_has(env, "AXONN_RESTART=" + std::to_string(attempt))) continue;
    if (cmdline.find(std::string("train") + '\0') == std::string::npos) continue;
    for (int r : ranks)
      if (environment_has(env, "PMIX_RANK=" + std::to_string(r))) pids.push_back(std::stoi(name));
  }
  return pids;
}

// SIGKILLs every one of `pids`, back to back, as a node that vanishes takes them all at once.
inline void kill_all(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) kill(pid, SIGKILL);
}

}  // namespace axonn::test
