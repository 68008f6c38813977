// A launcher process for test_pmix's tests that signal or kill the launcher itself (they
// need it in a process of its own, and a fresh one: the PMIx server cannot start again in
// a process that forked from one running it).
//   pmix_launch_worker RANKS NODES GRACE_MS COMMAND [ARGS...]
// Runs run_local_job with the ranks' output on its own stdout/stderr, then prints
// "launcher exit_code=E failure=F dir=D" on stderr (D: the PMIx server's directory, which
// must be gone once this process has exited) and exits with E.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runner/pmix/local_launcher.hpp"
#include "runner/pmix/pmix_server.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: pmix_launch_worker RANKS NODES GRACE_MS COMMAND [ARGS...]\n");
    return 2;
  }
  axonn::LocalJobOptions options;
  options.ranks = std::atoi(argv[1]);
  options.nodes_sim = std::atoi(argv[2]);
  options.grace = std::chrono::milliseconds(std::atoi(argv[3]));
  options.argv.assign(argv + 4, argv + argc);
  try {
    const axonn::LocalJobResult result = axonn::run_local_job(options);
    std::fprintf(stderr, "launcher exit_code=%d failure=%s dir=%s\n", result.exit_code, result.failure.c_str(),
                 axonn::pmix_server_directory().c_str());
    return result.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launcher error: %s\n", e.what());
    return 1;
  }
}
