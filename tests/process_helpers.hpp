#pragma once
// Running the axonn executable (and other commands) from tests: output, exit code, time.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace axonn::test {

// The build tree (bin/axonn, the tests' scratch folders) and the source tree: the
// environment's AXONN_BINARY_DIR / AXONN_SOURCE_DIR when set and not empty, else the paths
// this test was compiled with. The environment is for the binaries copied elsewhere, as
// scripts/gpu_bundle.sh does for a GPU machine (its env.sh sets both).
inline std::string tree_dir(const char* variable, const char* compiled) {
  const char* v = std::getenv(variable);
  return v != nullptr && *v != '\0' ? v : compiled;
}

inline const std::string kBinaryDir = tree_dir("AXONN_BINARY_DIR", AXONN_BINARY_DIR);
inline const std::string kSourceDir = tree_dir("AXONN_SOURCE_DIR", AXONN_SOURCE_DIR);
inline const std::string kAxonn = kBinaryDir + "/bin/axonn";

struct CommandResult {
  int code = -1;       // exit status; 128+signal when killed; 124 when `timeout` stopped it
  std::string output;  // stdout and stderr
  double seconds = 0;
};

// Runs `command` through /bin/sh with a hard time limit. A pgrep/pkill pattern must not
// match this shell's own command line: write one letter in brackets ("[s]leep 4").
inline CommandResult run_command(const std::string& command, int timeout_s = 60) {
  CommandResult r;
  const auto start = std::chrono::steady_clock::now();
  const std::string full = "timeout -k 5 " + std::to_string(timeout_s) + " sh -c '" + command + "' 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// How many times `needle` starts in `haystack` (overlapping ones counted).
inline size_t occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

// Debian's /usr/bin/python3 with h5py and numpy (python3-h5py): what the tests that read
// checkpoints with h5py need; they skip, naming the package, without it.
inline bool python_has_h5py() {
  return std::system("test -x /usr/bin/python3 && /usr/bin/python3 -c \"import h5py, numpy\" 2>/dev/null") == 0;
}

}  // namespace axonn::test
