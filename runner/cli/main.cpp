// axonn: the one executable. `axonn <command> [options]`; see README.md.
// main() is the only place that turns exceptions into an exit code and one line on stderr.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "checkpoint/checkpoint_error.hpp"
#include "cli/run_layout.hpp"
#include "comm/communicator.hpp"
#include "config/config_error.hpp"
#include "layout/layout.hpp"
#include "pmix/pmix_client.hpp"
#include "trainer/data/token_data.hpp"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const axonn::CommandArgs&);
};

const Command kCommands[] = {
    {"data", "make a token file from text (prepare IN -o OUT.bin) or describe one (info FILE)", axonn::command_data},
    {"layout", "rank the 4D parallel layouts for a job on a site (--site S --job J --nodes N)", axonn::command_layout},
    {"run", "run N ranks on this machine under a local PMIx server (-n N [--nodes-sim K] job.toml | CMD)",
     axonn::command_run},
    {"train", "train the job's GPT on this job's ranks (under axonn run, srun --mpi=pmix or mpirun): JOB.toml",
     axonn::command_train},
    {"selftest", "check topology and every collective on every axis (under axonn run or srun --mpi=pmix)",
     axonn::command_selftest},
    {"ckpt", "inspect, verify, plan a resume of, or export a checkpoint: inspect|verify|plan|export DIR",
     axonn::command_ckpt},
};

// One line on stderr and the exit code for an exception that escaped a command: the
// library errors already say what was wrong; anything else is marked "error:".
int report_failure(const char* command, const std::exception& e) {
  const bool bad_input = dynamic_cast<const axonn::UsageError*>(&e) || dynamic_cast<const axonn::ConfigError*>(&e) ||
                         dynamic_cast<const axonn::LayoutError*>(&e) || dynamic_cast<const axonn::DataError*>(&e) ||
                         dynamic_cast<const axonn::DirectoryUnavailable*>(&e);
  const bool typed =
      bad_input || dynamic_cast<const axonn::PmixError*>(&e) || dynamic_cast<const axonn::CommError*>(&e);
  std::fprintf(stderr, "axonn %s: %s%s\n", command, typed ? "" : "error: ", e.what());
  if (dynamic_cast<const axonn::NoFittingLayout*>(&e)) return axonn::exit_code::no_layout;
  return bad_input ? axonn::exit_code::bad_input : axonn::exit_code::failure;
}

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: axonn <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`axonn <command> --help` describes a command's options.\n");
}

}  // namespace

bool axonn::is_axonn_command(const std::string& name) {
  for (const auto& c : kCommands)
    if (name == c.name) return true;
  return false;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return axonn::exit_code::bad_input;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return axonn::exit_code::ok;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const std::exception& e) {
      return report_failure(c.name, e);
    }
  }
  std::fprintf(stderr, "axonn: unknown command '%s'\n", name.c_str());
  print_usage(stderr);
  return axonn::exit_code::bad_input;
}
