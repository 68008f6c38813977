#pragma once
// `axonn ckpt <inspect|verify|plan|export> DIR`: the subcommands, one file each
// (cli/ckpt_<name>.cpp; verify and export are small and live in ckpt_command.cpp). Each
// returns the exit code; exceptions go to command_ckpt, which prints one line.
#include "runner/cli/commands.hpp"

namespace axonn {

int ckpt_inspect(const CommandArgs& args);
int ckpt_plan(const CommandArgs& args);

}  // namespace axonn
