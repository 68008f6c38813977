// axonn ckpt inspect DIR [--step N] [--fallback] [--json]     what a committed step holds
// axonn ckpt verify DIR [--step N]                            every checksum; exit 1 naming each problem
// axonn ckpt plan DIR --layout DxXxYxZ[eN][:order] [...]           dry run of a resume at another layout
// axonn ckpt export DIR --to safetensors [-o FILE] [--only params] [--names axonn|mixtral] [--step N]
//     full tensors for other tools; --names mixtral: MoE routers and experts as Mixtral names them
// axonn ckpt import-hf MODEL_DIR --job JOB.toml -o CKPT_DIR   Hugging Face Llama weights as step 0
// axonn ckpt export-hf CKPT_DIR -o MODEL_DIR [--step N]       a Llama checkpoint as Hugging Face's
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
#include "runner/cli/args.hpp"
#include "runner/ckpt/ckpt.hpp"
#include "runner/ckpt/ckpt_format.hpp"
#include "runner/ckpt/ckpt_open.hpp"
#include "runner/ckpt/export_names.hpp"
#include "runner/ckpt/hf_commands.hpp"
#include "runner/cli/report_error.hpp"
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
    "                              [--only params] [--names mixtral]  (MoE experts under Mixtral names)\n"
    "       axonn ckpt import-hf MODEL_DIR --job JOB.toml -o CKPT_DIR  Hugging Face Llama weights as a step-0 "
    "checkpoint\n"
    "       axonn ckpt export-hf DIR -o MODEL_DIR [--step N]          a Llama checkpoint as a Hugging Face model "
    "directory\n"
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

// The optimizer state ("adam.m/<name>", "adam.v/<name>"); parameters are the other tensors.
bool is_adam_moment(const std::string& name) { return name.rfind("adam.m/", 0) == 0 || name.rfind("adam.v/", 0) == 0; }

int export_command(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"to", true, "the output format: safetensors"},
      {"output", true, "the file to write (-o); default <step dir name>[.params].safetensors in the current directory"},
      {"only", true, "params: the parameters without the AdamW moments (adam.m/, adam.v/)"},
      {"names", true,
       "axonn (default), or mixtral: MoE routers and experts as MixtralForCausalLM loads them, [out, in], one "
       "tensor per expert (docs/moe.md)"},
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
  const ExportNames naming = parse_export_names(args.value("names").value_or("axonn"));
  const StepChoice choice = choose_step(one_dir(args, "export"), step_option(args));
  CheckpointReader reader = open_step_choice(choice, false, "ckpt export");
  const std::string stem = fs::absolute(reader.step_dir()).lexically_normal().filename().string();
  const fs::path out = args.value("output").value_or(stem + (only.empty() ? "" : ".params") + ".safetensors");
  std::vector<TensorInfo> tensors;
  for (const TensorInfo& t : reader.tensors())
    if (only.empty() || !is_adam_moment(t.name)) tensors.push_back(t);
  if (!only.empty() && tensors.empty())
    throw UsageError("--only params: " + reader.step_dir().string() + " holds only AdamW moments");
  const NamedExport named = export_entries(tensors, naming);
  export_safetensors(reader, out, named.entries);
  std::printf("wrote %s: %zu tensors, %s, step %lld written at %s (checksums verified while reading)\n",
              out.string().c_str(), named.entries.size(), human_bytes(static_cast<int64_t>(fs::file_size(out))).c_str(),
              static_cast<long long>(reader.step()), reader.metadata().layout.c_str());
  if (naming == ExportNames::mixtral && named.moe_blocks_renamed == 0)
    std::printf("--names mixtral: no MoE tensors to rename (a dense model); every tensor has its axonn name\n");
  if (naming == ExportNames::mixtral && named.moe_blocks_renamed > 0)
    std::printf(
        "--names mixtral: the routers and experts of %d MoE block%s under "
        "model.layers.<l>.block_sparse_moe.{gate,experts.<e>.w1,experts.<e>.w2} ([out, in], one tensor per "
        "expert); the other tensors under their axonn names\n",
        named.moe_blocks_renamed, named.moe_blocks_renamed == 1 ? "" : "s");
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
  if (sub == "import-hf") run = ckpt_import_hf;
  if (sub == "export-hf") run = ckpt_export_hf;
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return exit_code::ok;
  }
  if (!run)
    throw UsageError((sub.empty() ? std::string("missing ckpt command") : "unknown ckpt command '" + sub + "'") +
                     "; use inspect, verify, plan, export, import-hf or export-hf (axonn ckpt --help)");
  try {
    return run(rest);
  } catch (const std::exception& e) {
    return report_error("ckpt " + sub, e);
  }
}

}  // namespace axonn
