#pragma once
// The benchmarks' command lines, read with the parser of the axonn commands
// (runner/cli/args.hpp): `--name value`, `--name=value`, flags and positionals; `--help`
// prints the usage line and the options.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runner/cli/args.hpp"
#include "core/exit_codes.hpp"
#include "layout/layout_inputs.hpp"

namespace axonn::bench {

// Parses argv[1..argc) against specs (which list "help") and returns read(args), the
// benchmark's options. `--help` prints "usage: <usage>" and the options to stdout and exits
// 0; a bad argument (Args's UsageError, or one `read` throws) is "<program>: <message>" and
// the usage line on stderr, exit 2. Exits, since a benchmark holds nothing yet when it parses.
template <class Read>
auto parse_bench_args(int argc, char** argv, const std::vector<OptionSpec>& specs, const std::string& usage,
                      Read read) {
  try {
    const std::optional<Args> args = parse_or_usage(std::vector<std::string>(argv + 1, argv + argc), specs, usage);
    if (!args) std::exit(exit_code::ok);
    return read(*args);
  } catch (const UsageError& e) {
    const std::string name = usage.substr(0, usage.find(' '));
    std::fprintf(stderr, "%s: %s\nusage: %s\n", name.c_str(), e.what(), usage.c_str());
    std::exit(exit_code::bad_input);
  }
}

// The one optional DIR positional of a benchmark: nullopt without one; UsageError when there
// are more, or it looks like an option ("-x").
inline std::optional<std::string> optional_dir(const Args& args) {
  const std::vector<std::string>& words = args.positionals();
  if (words.size() > 1) throw UsageError("takes at most one DIR, got " + std::to_string(words.size()));
  if (words.empty()) return std::nullopt;
  if (words[0].rfind('-', 0) == 0) throw UsageError("unknown option '" + words[0] + "'");
  return words[0];
}

// A count option (at least 1) as an int, `fallback` when it is not given.
inline int count_option(const Args& args, const std::string& name, int fallback) {
  return static_cast<int>(args.integer(name, 1, 1 << 30).value_or(fallback));
}

// The GPT a training benchmark runs and its batch, over the defaults given: the options
// "layers", "hidden", "heads", "vocab", "sequence", "batch" and "micro-batch", each a count.
inline void read_model_options(const Args& args, ModelShape& model, int& batch, int& micro_batch) {
  model.layers = count_option(args, "layers", model.layers);
  model.hidden = count_option(args, "hidden", model.hidden);
  model.heads = count_option(args, "heads", model.heads);
  model.vocab = count_option(args, "vocab", model.vocab);
  model.sequence = count_option(args, "sequence", model.sequence);
  batch = count_option(args, "batch", batch);
  micro_batch = count_option(args, "micro-batch", micro_batch);
}

// UsageError for the first positional, when a benchmark takes none.
inline void no_positionals(const Args& args) {
  if (!args.positionals().empty()) throw UsageError("unexpected argument '" + args.positionals()[0] + "'");
}

}  // namespace axonn::bench
