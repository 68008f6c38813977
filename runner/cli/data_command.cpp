// axonn data prepare INPUT -o OUT.bin        any file -> llm.c token file, one token per byte
// axonn data info [FILE] [--format F] [--sequence T] [--vocab V --global-batch B]
// `info` without FILE describes the built-in corpus (what a job with no data.path trains on).
// Bad input (a missing, empty or malformed file) is a DataError: exit 2 through main.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "runner/cli/args.hpp"
#include "runner/cli/commands.hpp"
#include "core/exit_codes.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace axonn {
namespace {

const char* const kUsage =
    "usage: axonn data prepare INPUT -o OUT.bin   tokenize any file byte by byte (vocabulary 256) into an llm.c "
    ".bin\n"
    "       axonn data info [FILE] [options]      format, tokens, samples, largest id (no FILE: the built-in "
    "corpus)\n";

// `-o X` is the short form of `--output X`.
CommandArgs with_long_options(CommandArgs argv) {
  std::replace(argv.begin(), argv.end(), std::string("-o"), std::string("--output"));
  return argv;
}

int prepare(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"output", true, "the llm.c token file to write (-o)"},
      {"help", false, "this help"},
  };
  const std::optional<Args> parsed =
      parse_or_usage(with_long_options(argv), specs, "axonn data prepare INPUT -o OUT.bin");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().size() != 1)
    throw UsageError("data prepare takes one INPUT file, got " + std::to_string(args.positionals().size()) +
                     "; usage: axonn data prepare INPUT -o OUT.bin");
  if (!args.has("output")) throw UsageError("data prepare needs -o OUT.bin (the token file to write)");
  const std::string& input = args.positionals()[0];
  const std::string output = args.required("output");
  const int64_t tokens = prepare_token_file(input, output);
  std::printf("wrote %s: %lld tokens (llm.c tokens, byte-level vocabulary 256) from %s\n", output.c_str(),
              static_cast<long long>(tokens), input.c_str());
  return exit_code::ok;
}

int info(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"format", true, "auto (default), tokens or text"},
      {"sequence", true, "sequence length T for the sample count (default 1024)"},
      {"vocab", true, "also check every id is below this vocabulary"},
      {"global-batch", true, "also check the file holds one global batch of samples (default 1)"},
      {"help", false, "this help"},
  };
  const std::optional<Args> parsed = parse_or_usage(argv, specs, "axonn data info [FILE] [options]");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().size() > 1)
    throw UsageError("data info takes at most one FILE, got " + std::to_string(args.positionals().size()));
  const std::string format = args.value("format").value_or("auto");
  const int sequence = static_cast<int>(args.integer("sequence", 1, 1 << 24).value_or(1024));

  TokenData data;
  std::string format_name = "text bytes (built-in corpus)";
  if (args.positionals().empty()) {
    data = builtin_corpus();
  } else {
    const std::string& path = args.positionals()[0];
    TokenFile file = read_token_file(path, format);
    format_name = file.format;
    const std::string description = path + " (" + file.format + ", " + std::to_string(file.tokens.size()) + " tokens)";
    data = TokenData::from_tokens(std::move(file.tokens), description);
  }
  const int32_t* begin = data.data();
  const int32_t max_id = *std::max_element(begin, begin + data.size());
  const int64_t samples = (data.size() - 1) / sequence;
  std::printf("data:     %s\nformat:   %s\ntokens:   %lld\nmax id:   %d (needs vocab >= %d)\n",
              data.description().c_str(), format_name.c_str(), static_cast<long long>(data.size()), max_id, max_id + 1);
  std::printf("samples:  %lld of sequence %d (+1 target token)\n", static_cast<long long>(samples), sequence);
  if (args.has("vocab") || args.has("global-batch")) {
    const int vocab = static_cast<int>(args.integer("vocab", 1, 1 << 30).value_or(max_id + 1));
    const int batch = static_cast<int>(args.integer("global-batch", 1, 1 << 30).value_or(1));
    data.validate(vocab, sequence, batch);
    std::printf("ok:       trains vocab %d, sequence %d, global batch %d; steps per epoch: %lld\n", vocab, sequence,
                batch, static_cast<long long>(samples / batch));
  }
  return exit_code::ok;
}

}  // namespace

int command_data(const CommandArgs& argv) {
  const std::string sub = argv.empty() ? "" : argv[0];
  const CommandArgs rest(argv.begin() + (argv.empty() ? 0 : 1), argv.end());
  if (sub == "prepare") return prepare(rest);
  if (sub == "info") return info(rest);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return exit_code::ok;
  }
  throw UsageError((sub.empty() ? std::string("missing data command") : "unknown data command '" + sub + "'") +
                   "; use 'prepare' or 'info' (axonn data --help)");
}

}  // namespace axonn
