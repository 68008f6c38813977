// axonn ckpt inspect DIR [--step N] [--fallback] [--json]     what a committed step holds
// axonn ckpt verify DIR [--step N]                            every checksum; exit 1 naming each problem
// axonn ckpt plan DIR --layout DxXxYxZ[eN][:order] [...]           dry run of a resume at another layout
// axonn ckpt export DIR --to safetensors [-o FILE] [--only params] [--step N]   full tensors for other tools
// DIR is a checkpoint directory (then the step `latest` names) or a step directory.
// Exit codes: 0 ok; 1 the checkpoint is damaged (checksum, missing shard, unknown format,
// inconsistent index) or cannot be written out; 2 bad input (arguments, no checkpoint at DIR,
// a plan layout that does not divide the model).
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/safetensors.hpp"
#include "checkpoint/step_dir.hpp"
#include "checkpoint/verify.hpp"
#include "cli/args.hpp"
#include "cli/ckpt.hpp"
#include "cli/ckpt_format.hpp"
#include "cli/ckpt_open.hpp"
#include "cli/report_error.hpp"
#include "core/exit_codes.hpp"
#include "layout/layout.hpp"

namespace fs = std::filesystem;

namespace axonn {
namespace {

const char* const kUsage =
    "usage: axonn ckpt inspect DIR [--step N] [--fallback] [--json]   step, layout, model, metadata, tensors, "
    "shards\n"
    "       axonn ckpt verify DIR [--step N]                          recompute every checksum (exit 1 on a "
    "mismatch)\n"
    "       axonn ckpt plan DIR --layout DxXxYxZ[eN][:order]              files and bytes each rank of a resume at the "
    "layout reads\n"
    "       axonn ckpt export DIR --to safetensors [-o FILE]          every full tensor in one safetensors file\n"
    "DIR: a checkpoint directory (the step `latest` names) or a step directory (step-NNNNNNNNN, holding index.h5).\n"
    "`axonn ckpt <command> --help` lists a command's options.\n";

std::optional<int64_t> step_option(const Args& args) {
  return args.integer("step", 0, std::numeric_limits<long>::max());
}

const std::string& one_dir(const Args& args, const std::string& command) {
  if (args.positionals().size() != 1)
    throw UsageError("takes one DIR, got " + std::to_string(args.positionals().size()) + "; see axonn ckpt " + command +
                     " --help");
  return args.positionals()[0];
}

int verify(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"step", true, "verify another committed step than `latest` (DIR is then the checkpoint directory)"},
      {"help", false, "this help"},
  };
  const std::optional<Args> parsed = parse_or_usage(argv, specs, "axonn ckpt verify DIR [options]");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  const StepChoice choice = choose_step(one_dir(args, "verify"), step_option(args));
  require_step_dir(choice);
  const VerifyReport report = verify_checkpoint(choice.step_dir);
  std::fputs(format_verify_report(report).c_str(), report.ok() ? stdout : stderr);
  if (report.ok()) return exit_code::ok;
  std::fprintf(stderr,
               "axonn ckpt verify: %zu problem%s in %s: a resume from it stops with a checksum or missing-shard "
               "error; `axonn train --fallback` resumes from the previous committed step instead\n",
               report.problems.size(), report.problems.size() == 1 ? "" : "s", choice.step_dir.string().c_str());
  return exit_code::failure;
}

// Parameters are the tensors outside the optimizer state ("adam.m/...", "adam.v/...").
std::vector<std::string> parameter_names(const CheckpointReader& reader) {
  std::vector<std::string> names;
  for (const TensorInfo& t : reader.tensors())
    if (t.name.rfind("adam.m/", 0) != 0 && t.name.rfind("adam.v/", 0) != 0) names.push_back(t.name);
  return names;
}

int export_command(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"to", true, "the output format: safetensors"},
      {"output", true, "the file to write (-o); default <step dir name>[.params].safetensors in the current directory"},
      {"only", true, "params: the parameters without the AdamW moments (adam.m/, adam.v/)"},
      {"step", true, "export another committed step than `latest` (DIR is then the checkpoint directory)"},
      {"help", false, "this help"},
  };
  CommandArgs long_argv = argv;
  for (std::string& a : long_argv)
    if (a == "-o") a = "--output";
  const std::optional<Args> parsed =
      parse_or_usage(long_argv, specs, "axonn ckpt export DIR --to safetensors [options]");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  const std::string format = args.value("to").value_or("");
  if (format != "safetensors")
    throw UsageError(format.empty() ? "needs --to safetensors (the only output format)"
                                    : "unknown format --to " + format + "; the only one is safetensors");
  const std::string only = args.value("only").value_or("");
  if (args.has("only") && only != "params")
    throw UsageError("unknown --only " + only + "; use --only params (parameters without AdamW moments)");
  const StepChoice choice = choose_step(one_dir(args, "export"), step_option(args));
  CheckpointReader reader = open_step_choice(choice, false, "ckpt export");
  const std::string stem = fs::absolute(reader.step_dir()).lexically_normal().filename().string();
  const fs::path out = args.value("output").value_or(stem + (only.empty() ? "" : ".params") + ".safetensors");
  const std::vector<std::string> names = only.empty() ? std::vector<std::string>{} : parameter_names(reader);
  if (!only.empty() && names.empty())
    throw UsageError("--only params: " + reader.step_dir().string() + " holds only AdamW moments");
  export_safetensors(reader, out, ReadOptions{}, names);
  std::printf("wrote %s: %zu tensors, %s, step %lld written at %s (checksums verified while reading)\n",
              out.string().c_str(), names.empty() ? reader.tensors().size() : names.size(),
              human_bytes(static_cast<int64_t>(fs::file_size(out))).c_str(), static_cast<long long>(reader.step()),
              reader.metadata().layout.c_str());
  return exit_code::ok;
}

}  // namespace

int command_ckpt(const CommandArgs& argv) {
  const std::string sub = argv.empty() ? "" : argv[0];
  const CommandArgs rest(argv.begin() + (argv.empty() ? 0 : 1), argv.end());
  int (*run)(const CommandArgs&) = nullptr;
  if (sub == "inspect") run = ckpt_inspect;
  if (sub == "verify") run = verify;
  if (sub == "plan") run = ckpt_plan;
  if (sub == "export") run = export_command;
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return exit_code::ok;
  }
  if (!run)
    throw UsageError((sub.empty() ? std::string("missing ckpt command") : "unknown ckpt command '" + sub + "'") +
                     "; use inspect, verify, plan or export (axonn ckpt --help)");
  try {
    return run(rest);
  } catch (const std::exception& e) {
    return report_error("ckpt " + sub, e);
  }
}

}  // namespace axonn
