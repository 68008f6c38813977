#pragma once
// Starting one rank of a local job: fork and exec with the rank's environment, in the
// job's process group, stdin from /dev/null, stdout and stderr into pipes the launcher
// reads, and SIGKILL as parent-death signal so no rank outlives a launcher killed with -9.
#include <sys/types.h>

#include <string>
#include <vector>

namespace axonn {

struct WorkerProcess {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends, close-on-exec
  int stderr_fd = -1;
};

// The executable `argv0` names: itself when it contains a '/', else the first match on
// `path` (a PATH value). Throws LaunchError when there is none, before anything starts.
std::string resolve_executable(const std::string& argv0, const std::string& path);

// Forks and execs `executable` with `argv` and `env` ("KEY=VALUE"). `group` is the job's
// process group, 0 to make this worker lead a new one. The signals in `reset` get their
// default action in the child (the launcher's handlers must not run there); call with
// them blocked, so none is handled between fork and exec. Throws LaunchError when a pipe
// or the fork fails; an exec failure shows as the worker exiting with status 127.
WorkerProcess spawn_worker(const std::string& executable, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, pid_t group, const std::vector<int>& reset);

}  // namespace axonn
