// axonn data prepare INPUT... -o OUT [--tokenizer T] [--field F] [--output-format tokens|megatron] [--threads N]
//                                           text and JSON Lines documents -> llm.c token file or Megatron pair
// axonn data info [FILE] [--format F] [--sequence T] [--vocab V --global-batch B]
// axonn data decode FILE [--tokenizer T] [--sample I] [--sequence T] [--ids]
// `info` without FILE describes the built-in corpus (what a job with no data.path trains on);
// FILE may be a Megatron pair's PREFIX (or its .bin or .idx), read in place as a job would.
// Bad input (a missing, empty or malformed file) is a DataError: exit 2 through main.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "core/exit_codes.hpp"
#include "runner/cli/args.hpp"
#include "runner/cli/commands.hpp"
#include "runner/prepare/documents.hpp"
#include "runner/prepare/prepare_pipeline.hpp"
#include "runner/prepare/progress_line.hpp"
#include "runner/tokenize/tokenizer.hpp"
#include "trainer/data/llmc_writer.hpp"
#include "trainer/data/megatron_dataset.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace axonn {
namespace {

const char* const kUsage =
    "usage: axonn data prepare INPUT... -o OUT    tokenize text and JSON Lines documents into an llm.c .bin or a "
    "Megatron pair\n"
    "       axonn data info [FILE] [options]      format, tokens, samples, largest id (no FILE: the built-in "
    "corpus)\n"
    "       axonn data decode FILE [options]      the text of one sample, through a tokenizer\n";

// `-o X` is the short form of `--output X`.
CommandArgs with_long_options(CommandArgs argv) {
  std::replace(argv.begin(), argv.end(), std::string("-o"), std::string("--output"));
  return argv;
}

// The output for -o OUT: an llm.c file, or a Megatron pair named by its prefix (a ".bin" or
// ".idx" ending is taken off: both files are written).
std::unique_ptr<TokenSink> open_sink(const std::string& output, const std::string& format, int64_t vocab) {
  if (format == "tokens") return std::make_unique<LlmcWriter>(output, vocab);
  if (format == "megatron") {
    std::string prefix = output;
    for (const char* suffix : {".bin", ".idx"})
      if (prefix.size() > 4 && prefix.ends_with(suffix)) prefix.resize(prefix.size() - 4);
    return std::make_unique<MegatronWriter>(prefix, MegatronWriter::dtype_for_vocab(vocab));
  }
  throw UsageError("unknown --output-format '" + format + "'; use tokens (an llm.c .bin) or megatron (PREFIX.bin and "
                   "PREFIX.idx)");
}

int prepare(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"output", true, "the file to write (-o): an llm.c .bin, or with --output-format megatron a PREFIX"},
      {"tokenizer", true, "tokenizer.json (byte-level BPE) or a SentencePiece .model; default: one token per byte"},
      {"field", true, "the JSON Lines member holding each document's text (default text)"},
      {"output-format", true, "tokens (llm.c .bin, default) or megatron (PREFIX.bin + PREFIX.idx)"},
      {"threads", true, "encoding threads (default: every core)"},
      {"help", false, "this help"},
  };
  const std::string usage = "axonn data prepare INPUT... -o OUT [options]";
  const std::optional<Args> parsed = parse_or_usage(with_long_options(argv), specs, usage);
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().empty())
    throw UsageError("data prepare needs at least one INPUT (text or JSON Lines files, or folders); usage: " + usage);
  if (!args.has("output")) throw UsageError("data prepare needs -o OUT.bin (the token file to write)");
  const std::string output = args.required("output");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  PrepareOptions options;
  options.threads = static_cast<int>(args.integer("threads", 1, 4096).value_or(cores));

  const std::unique_ptr<Tokenizer> tokenizer =
      args.has("tokenizer") ? load_tokenizer(args.required("tokenizer")) : std::make_unique<ByteTokenizer>();
  const std::vector<InputFile> inputs = list_inputs(args.positionals());
  DocumentReader reader(inputs, args.value("field").value_or("text"));
  const std::unique_ptr<TokenSink> sink =
      open_sink(output, args.value("output-format").value_or("tokens"), tokenizer->vocab_size());

  ProgressLine progress(::isatty(STDERR_FILENO) == 1);
  options.on_progress = [&](const PrepareProgress& p) { progress.show(p); };
  const PrepareProgress done = prepare_documents(reader, *tokenizer, *sink, options);
  progress.done();
  std::printf("wrote %s: %lld tokens in %lld documents (%s)\n", output.c_str(), static_cast<long long>(done.tokens),
              static_cast<long long>(done.documents), sink->description().c_str());
  std::printf("from %zu input files, %.1f MB, in %.1f s on %d threads: %.1f MB/s, %.0f tokens/s\n", inputs.size(),
              static_cast<double>(done.bytes_read) / 1e6, done.seconds, options.threads,
              static_cast<double>(done.bytes_read) / 1e6 / std::max(done.seconds, 1e-9),
              static_cast<double>(done.tokens) / std::max(done.seconds, 1e-9));
  std::printf("tokenizer: %s\n", tokenizer->description().c_str());
  return exit_code::ok;
}

int info(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"format", true, "auto (default), tokens, text or megatron"},
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
  std::string structure;  // a Megatron pair's documents and sequences
  if (args.positionals().empty()) {
    data = builtin_corpus();
  } else if (const std::optional<std::string> prefix = megatron_prefix(args.positionals()[0], format)) {
    const MegatronDataset pair = MegatronDataset::open(*prefix);
    format_name = pair.format_name();
    structure = "documents: " + std::to_string(pair.index().document_count) +
                "\nsequences: " + std::to_string(pair.index().sequence_count) + "\n";
    data = pair.tokens();
  } else {
    const std::string& path = args.positionals()[0];
    TokenFile file = read_token_file(path, format);
    format_name = file.format;
    const std::string description = path + " (" + file.format + ", " + std::to_string(file.tokens.size()) + " tokens)";
    data = TokenData::from_tokens(std::move(file.tokens), description);
  }
  const int64_t max_id = data.id_range().highest;
  const int64_t samples = (data.size() - 1) / sequence;
  std::printf("data:     %s\nformat:   %s\ntokens:   %lld\n%smax id:   %lld (needs vocab >= %lld)\n",
              data.description().c_str(), format_name.c_str(), static_cast<long long>(data.size()),
              structure.c_str(), static_cast<long long>(max_id), static_cast<long long>(max_id) + 1);
  std::printf("samples:  %lld of sequence %d (+1 target token)\n", static_cast<long long>(samples), sequence);
  if (args.has("vocab") || args.has("global-batch")) {
    const int vocab = static_cast<int>(
        args.integer("vocab", 1, 1 << 30).value_or(std::clamp<int64_t>(max_id + 1, 1, int64_t{1} << 30)));
    const int batch = static_cast<int>(args.integer("global-batch", 1, 1 << 30).value_or(1));
    data.validate(vocab, sequence, batch);
    std::printf("ok:       trains vocab %d, sequence %d, global batch %d; steps per epoch: %lld\n", vocab, sequence,
                batch, static_cast<long long>(samples / batch));
  }
  return exit_code::ok;
}

// The text of one sample, as a user checks what a job will train on: window I of the token
// stream (tokens [I·T, I·T + T + 1), the inputs and the last target), decoded.
int decode(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"tokenizer", true, "tokenizer.json or a SentencePiece .model (default: one token per byte)"},
      {"format", true, "the file's format, as data.format (default auto)"},
      {"sequence", true, "sequence length T (default 1024)"},
      {"sample", true, "which window: tokens [I*T, I*T + T + 1) (default 0)"},
      {"ids", false, "print the ids too"},
      {"help", false, "this help"},
  };
  const std::string usage = "axonn data decode FILE [--tokenizer T] [--sample I] [--sequence T] [--ids]";
  const std::optional<Args> parsed = parse_or_usage(argv, specs, usage);
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  if (args.positionals().size() != 1)
    throw UsageError("data decode takes one FILE, got " + std::to_string(args.positionals().size()) + "; usage: " +
                     usage);
  const std::string& path = args.positionals()[0];
  const int sequence = static_cast<int>(args.integer("sequence", 1, 1 << 24).value_or(1024));
  const int64_t sample = args.integer("sample", 0, std::numeric_limits<long>::max()).value_or(0);
  const std::unique_ptr<Tokenizer> tokenizer =
      args.has("tokenizer") ? load_tokenizer(args.required("tokenizer")) : std::make_unique<ByteTokenizer>();
  const TokenData data = TokenData::load({path, args.value("format").value_or("auto")});
  const int64_t samples = (data.size() - 1) / sequence;
  if (sample >= samples)
    throw DataError(data.description() + " holds " + std::to_string(samples) + " samples of sequence " +
                    std::to_string(sequence) + "; --sample " + std::to_string(sample) + " is past the last (" +
                    std::to_string(samples - 1) + ")");
  const int64_t first = sample * sequence;
  std::vector<int32_t> ids(static_cast<size_t>(sequence) + 1);
  data.copy(first, sequence + 1, ids.data());
  std::printf("%s, sample %lld of %lld: tokens [%lld, %lld), decoded with %s\n", data.description().c_str(),
              static_cast<long long>(sample), static_cast<long long>(samples), static_cast<long long>(first),
              static_cast<long long>(first + sequence + 1), tokenizer->description().c_str());
  if (args.has("ids")) {
    std::string line = "ids:";
    for (const int32_t id : ids) line.append(" ").append(std::to_string(id));
    std::printf("%s\n", line.c_str());
  }
  std::printf("%s\n", tokenizer->decode(ids).c_str());
  return exit_code::ok;
}

}  // namespace

int command_data(const CommandArgs& argv) {
  const std::string sub = argv.empty() ? "" : argv[0];
  const CommandArgs rest(argv.begin() + (argv.empty() ? 0 : 1), argv.end());
  if (sub == "prepare") return prepare(rest);
  if (sub == "info") return info(rest);
  if (sub == "decode") return decode(rest);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kUsage, stdout);
    return exit_code::ok;
  }
  throw UsageError((sub.empty() ? std::string("missing data command") : "unknown data command '" + sub + "'") +
                   "; use 'prepare', 'info' or 'decode' (axonn data --help)");
}

}  // namespace axonn
