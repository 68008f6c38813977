// axonn: the one executable. `axonn <command> [options]`; see README.md.
// Exceptions that escape a command become one line on stderr and the exit code their type
// names (cli/report_error.hpp).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "runner/cli/commands.hpp"
#include "runner/cli/report_error.hpp"
#include "core/exit_codes.hpp"
#include "version.hpp"

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
    {"calibrate",
     "measure this site's GEMM rates and links and write them as a site config (under axonn run or srun "
     "--mpi=pmix): --output SITE.toml",
     axonn::command_calibrate},
    {"ckpt", "inspect, verify, plan a resume of, or export a checkpoint: inspect|verify|plan|export DIR",
     axonn::command_ckpt},
};

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: axonn <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\n`axonn <command> --help` describes a command's options; `axonn --version` prints the version.\n");
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
  if (name == "--version") {
    std::printf("axonn %s\n", axonn::kAxonnVersion);
    return axonn::exit_code::ok;
  }
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
      return axonn::report_error(c.name, e);
    }
  }
  std::fprintf(stderr, "axonn: unknown command '%s'\n", name.c_str());
  print_usage(stderr);
  return axonn::exit_code::bad_input;
}
