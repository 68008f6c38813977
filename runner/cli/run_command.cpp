// axonn run -n N [--nodes-sim K] [--grace-ms G] [--max-restarts R] job.toml | train job.toml | selftest [args] |
// calibrate [args] | -- CMD [args]
// The local launcher: hosts a PMIx server and runs N ranks on this machine, like `srun --label`. A job TOML runs
// `axonn train job.toml` on every rank; an axonn subcommand name runs that subcommand; after `--`, any command.
// With --max-restarts R, a job that fails starts again, up to R times, on the pretend nodes
// left (pmix/restart_plan.hpp); a training run resumes from its newest checkpoint, and its
// rank 0 reports the recovery from the AXONN_RECOVERY times the launcher hands it.
//
// Everything is checked before the first rank starts, and a bad input is exit 2 (3 when no
// layout fits): the rank count against what this machine can hold (pmix/local_capacity.hpp),
// a first word that is neither a .toml nor an axonn command, a command not on PATH, for
// a training run (a .toml first, or `train`) its options, site, job TOML, overrides, data
// file, wrapper signal and layout, decided as every rank would for these N ranks, and for
// `calibrate` its options, site, job, output file and the link tiers it must measure.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/exit_codes.hpp"
#include "core/wall_clock.hpp"
#include "runner/calibrate/calibrate_inputs.hpp"
#include "runner/calibrate/calibrate_links.hpp"
#include "runner/cli/args.hpp"
#include "runner/cli/commands.hpp"
#include "runner/cli/local_memory_copies.hpp"
#include "runner/cli/newest_checkpoint.hpp"
#include "runner/cli/run_layout.hpp"
#include "runner/cli/train_inputs.hpp"
#include "runner/pmix/local_capacity.hpp"
#include "runner/pmix/local_launcher.hpp"
#include "runner/pmix/restart_plan.hpp"
#include "runner/pmix/worker_process.hpp"
#include "trainer/data/megatron_dataset.hpp"
#include "trainer/data/token_data.hpp"

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

// The topology every rank of this local job will read from PMIx (pretend_nodes' blocks).
Topology local_topology(const LocalJobOptions& opt) {
  Topology t;
  t.world = opt.ranks;
  const auto nodes = pretend_nodes(opt.ranks, opt.nodes_sim, this_hostname());
  t.nodes = static_cast<int>(nodes.size());
  t.node_of_rank.resize(static_cast<size_t>(opt.ranks));
  for (size_t n = 0; n < nodes.size(); ++n) {
    t.hostnames.push_back(nodes[n].hostname);
    for (int r : nodes[n].ranks) t.node_of_rank[static_cast<size_t>(r)] = static_cast<int>(n);
  }
  t.local_peers = nodes[0].ranks;
  t.local_size = static_cast<int>(nodes[0].ranks.size());
  return t;
}

// What a restart at another size checks again: the layout for the ranks that are left.
struct TrainCheck {
  TrainInputs inputs;
  std::optional<std::string> layout_option;
};

// `axonn train WORDS` on these ranks, checked here as its ranks would check it, so a bad
// job stops before any process starts. `--help` is left to the ranks (nullopt).
std::optional<TrainCheck> check_train_command(const CommandArgs& words, const LocalJobOptions& opt) {
  const Args args(words, train_option_specs());
  if (args.has("help")) return std::nullopt;
  TrainInputs inputs = load_train_inputs(args);
  check_wrapper_preempt_signal(inputs);
  args.integer("timeout-ms", kTimeoutMsMin, kTimeoutMsMax);
  struct Named {
    std::string key, path, format;
  };
  std::vector<Named> paths;
  for (const DataSourceConfig& source : inputs.job.data.training_sources())
    paths.push_back({inputs.job.data.sources.empty() ? "data.path" : "data.sources path", source.path, source.format});
  paths.push_back({"data.valid", inputs.job.data.valid, inputs.job.data.valid_format});
  // A Megatron PREFIX is no file itself; MegatronDataset::open names whichever half is missing.
  for (const auto& [key, data, format] : paths)
    if (!data.empty() && !megatron_prefix(data, format) && access(data.c_str(), R_OK) != 0)
      throw DataError(inputs.job.source + ": " + key + " " + data + " cannot be read: " + std::strerror(errno) +
                      "; give a token or text file (axonn data prepare), or an empty path for the built-in corpus");
  // Read once here as every rank will read it (an empty or short file, an id outside the
  // vocabulary): one read more, which leaves the file in the page cache the ranks read from.
  load_train_data(inputs.job);
  decide_run_layout(local_topology(opt), inputs.site.config, inputs.job, args.value("layout"));
  return TrainCheck{std::move(inputs), args.value("layout")};
}

// `axonn calibrate WORDS` on these ranks, checked here as its ranks would check it.
void check_calibrate_command(const CommandArgs& words, const LocalJobOptions& opt) {
  const Args args(words, calibrate_option_specs());
  if (args.has("help")) return;
  const CalibrateInputs inputs = load_calibrate_inputs(args);
  plan_links(local_topology(opt), inputs.site.config, inputs.tiers);
}

// Runs the job, and after a failure starts it again as restart_plan.hpp decides, up to
// `max_restarts` times; for a training run (`train`) on fewer ranks only when a layout fits
// them. Returns the exit code of the last attempt (or of the layout that did not fit).
int run_with_restarts(LocalJobOptions opt, const std::optional<TrainCheck>& train, int max_restarts) {
  const LocalMemoryCopies memory(train ? &train->inputs.job : nullptr);
  std::string recovery;  // after a failure: when the launcher saw it and when the last rank had exited
  for (int restarts = 0;; ++restarts) {
    opt.extra_env = {"AXONN_LAUNCHER=local", "AXONN_RESTART=" + std::to_string(restarts), memory.environment()};
    if (!recovery.empty()) opt.extra_env.push_back("AXONN_RECOVERY=" + recovery);
    const LocalJobResult result = run_local_job(opt);
    if (result.failure.empty()) {
      if (result.exit_code == exit_code::preempted)
        std::fprintf(stderr,
                     "axonn run: every rank exited with %d: stopped after a committed checkpoint; run it again "
                     "to resume\n",
                     exit_code::preempted);
      return result.exit_code;
    }
    std::fprintf(stderr, "axonn run: %s; stopped the other ranks\n", result.failure.c_str());
    const RestartPlan plan = plan_restart(opt, result, restarts, max_restarts);
    if (!plan.restart) {
      if (max_restarts > 0) std::fprintf(stderr, "axonn run: no restart: %s\n", plan.why.c_str());
      return result.exit_code;
    }
    if (train && plan.ranks != opt.ranks) {
      LocalJobOptions next = opt;
      next.ranks = plan.ranks;
      next.nodes_sim = plan.nodes_sim;
      try {
        decide_run_layout(local_topology(next), train->inputs.site.config, train->inputs.job, train->layout_option);
      } catch (const Error& e) {
        std::fprintf(stderr, "axonn run: no restart: no layout runs the job on the %d ranks left: %s; %s\n", plan.ranks,
                     e.what(), newest_checkpoint(train->inputs.job).c_str());
        return e.exit_code();
      }
    }
    opt.ranks = plan.ranks;
    opt.nodes_sim = plan.nodes_sim;
    memory.follow(plan, opt);
    std::fprintf(stderr, "axonn run: restart %d of %d: %s, %.2f s after the failure\n", restarts + 1, max_restarts,
                 plan.why.c_str(), unix_seconds_now() - result.failed_unix_s);
    // The next attempt's rank 0 reports the recovery, phase by phase, from these two times.
    recovery = fmt::format("{:.6f} {:.6f}", result.failed_unix_s, result.ended_unix_s);
  }
}

}  // namespace

int command_run(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"n", true, "number of ranks"},
      {"ranks", true, "same as -n"},
      {"nodes-sim", true, "pretend nodes to split the ranks over (default 1)"},
      {"grace-ms", true, "after a rank fails: SIGTERM, then SIGKILL after this long (default 3000)"},
      {"max-restarts", true,
       "after a failure, start the job again (on the pretend nodes left) up to this many times (default: a "
       "training job's run.max_restarts, else 0)"},
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
  const char* const usage =
      "axonn run -n N [--nodes-sim K] [--max-restarts R] job.toml | selftest [args] | calibrate [args] | -- CMD "
      "[args]";
  const std::optional<Args> parsed = parse_or_usage(own, specs, usage);
  if (!parsed) return exit_code::ok;
  if (command.empty()) {
    print_usage(usage, specs);
    return exit_code::bad_input;
  }
  const Args& args = *parsed;
  LocalJobOptions opt;
  opt.ranks = static_cast<int>(args.integer("n", 1, 4096).value_or(args.integer("ranks", 1, 4096).value_or(1)));
  opt.nodes_sim = static_cast<int>(args.integer("nodes-sim", 1, 4096).value_or(1));
  if (opt.nodes_sim > opt.ranks)
    throw UsageError("--nodes-sim " + std::to_string(opt.nodes_sim) + " is more than the " + std::to_string(opt.ranks) +
                     " ranks; use at most -n pretend nodes");
  opt.grace = std::chrono::milliseconds(args.integer("grace-ms", 0, 600'000).value_or(3000));
  if (const auto problem = local_capacity_problem(opt.ranks, read_machine_limits())) throw UsageError(*problem);

  const auto& rest = command;
  std::optional<TrainCheck> train;  // a training run's inputs, for a restart at another size
  if (after_dashes) {
    opt.argv = rest;
  } else if (ends_with(rest[0], ".toml") || rest[0] == "train") {
    opt.argv = {self_executable(), "train"};
    opt.argv.insert(opt.argv.end(), rest.begin() + (rest[0] == "train" ? 1 : 0), rest.end());
    train = check_train_command(CommandArgs(opt.argv.begin() + 2, opt.argv.end()), opt);
  } else if (is_axonn_command(rest[0])) {
    opt.argv = {self_executable()};
    opt.argv.insert(opt.argv.end(), rest.begin(), rest.end());
    if (rest[0] == "calibrate") check_calibrate_command(CommandArgs(rest.begin() + 1, rest.end()), opt);
  } else {
    throw UsageError("'" + rest[0] + "' is neither a job TOML (a .toml file) nor an axonn command (train, selftest, " +
                     "...); to run another program on every rank: axonn run -n " + std::to_string(opt.ranks) + " -- " +
                     rest[0]);
  }
  // A training job's own run.max_restarts unless --max-restarts says otherwise.
  const int max_restarts =
      static_cast<int>(args.integer("max-restarts", 0, 1000).value_or(train ? train->inputs.job.run.max_restarts : 0));
  const char* path = std::getenv("PATH");
  resolve_executable(opt.argv[0], path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  raise_open_file_limit(opt.ranks);

  return run_with_restarts(opt, train, max_restarts);
}

}  // namespace axonn
