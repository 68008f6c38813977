#pragma once
// The `axonn` subcommands. Each lives in its own cli/<name>.cpp and returns the
// process exit code (core/exit_codes.hpp); exceptions are turned into one clear
// line and an exit code by main (cli/report_error.hpp).
#include <string>
#include <vector>

namespace axonn {

using CommandArgs = std::vector<std::string>;  // the arguments after the subcommand name

int command_layout(const CommandArgs& args);
int command_run(const CommandArgs& args);
int command_selftest(const CommandArgs& args);
int command_calibrate(const CommandArgs& args);
int command_data(const CommandArgs& args);
int command_train(const CommandArgs& args);
int command_ckpt(const CommandArgs& args);

// Whether `name` is one of the subcommands above (main.cpp's table).
bool is_axonn_command(const std::string& name);

}  // namespace axonn
