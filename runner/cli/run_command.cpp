// axonn run -n N [--nodes-sim K] [--grace-ms G] job.toml | selftest [args] | -- CMD [args]
// The local launcher: hosts a PMIx server and runs N ranks on this machine, like
// `srun --label`. A job TOML runs `axonn train job.toml` on every rank; an axonn
// subcommand name runs that subcommand; after `--`, any command.
#include <unistd.h>

#include <climits>
#include <cstdio>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "pmix/local_launcher.hpp"

namespace axonn {
namespace {

std::string self_executable() {
  char path[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw std::runtime_error("cannot find the axonn executable (/proc/self/exe)");
  return std::string(path, static_cast<size_t>(n));
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

int command_run(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"n", true, "number of ranks"},
      {"ranks", true, "same as -n"},
      {"nodes-sim", true, "pretend nodes to split the ranks over (default 1)"},
      {"grace-ms", true, "after a rank fails: SIGTERM, then SIGKILL after this long (default 3000)"},
      {"help", false, "this help"},
  };
  // The launcher's options come first; from the first other word on, everything belongs
  // to the command (so `axonn run -n 4 selftest --layout 2x2x1x1` passes --layout on).
  // Accept the short "-n N" users know from srun and mpirun.
  CommandArgs own, command;
  bool after_dashes = false;  // `--`: run the command as given, not as an axonn subcommand
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string a = argv[i] == "-n" ? "--n" : argv[i];
    if (a == "--") {
      after_dashes = true;
      command.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (a.rfind("--", 0) != 0) {
      command.assign(argv.begin() + static_cast<long>(i), argv.end());
      break;
    }
    own.push_back(a);
    const bool takes_value = a.find('=') == std::string::npos && a != "--help";
    if (takes_value && i + 1 < argv.size()) own.push_back(argv[++i]);
  }
  const Args args(own, specs);
  if (args.has("help") || command.empty()) {
    std::printf("usage: axonn run -n N [--nodes-sim K] job.toml | selftest [args] | -- CMD [args]\n%s",
                format_options(specs).c_str());
    return args.has("help") ? exit_code::ok : exit_code::bad_input;
  }
  LocalJobOptions opt;
  opt.ranks = static_cast<int>(args.integer("n", 1, 4096).value_or(args.integer("ranks", 1, 4096).value_or(1)));
  opt.nodes_sim = static_cast<int>(args.integer("nodes-sim", 1, 4096).value_or(1));
  if (opt.nodes_sim > opt.ranks)
    throw UsageError("--nodes-sim " + std::to_string(opt.nodes_sim) + " is more than the " + std::to_string(opt.ranks) +
                     " ranks; use at most -n pretend nodes");
  opt.grace = std::chrono::milliseconds(args.integer("grace-ms", 0, 600'000).value_or(3000));
  const auto& rest = command;
  if (after_dashes) {
    opt.argv = rest;
  } else if (ends_with(rest[0], ".toml")) {
    opt.argv = {self_executable(), "train"};
    opt.argv.insert(opt.argv.end(), rest.begin(), rest.end());
  } else {
    opt.argv = {self_executable()};
    opt.argv.insert(opt.argv.end(), rest.begin(), rest.end());
  }
  opt.extra_env = {"AXONN_LAUNCHER=local"};
  const LocalJobResult result = run_local_job(opt);
  if (!result.failure.empty()) {
    std::fprintf(stderr, "axonn run: %s; stopped the other ranks\n", result.failure.c_str());
    return result.exit_code;
  }
  return exit_code::ok;
}

}  // namespace axonn
