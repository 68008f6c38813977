// Tokenizers' speed, one core, against the reference the exactness tests use, side by side:
// axonn's tokenizer.json BPE (runner/tokenize) and transformers.js's (npm's
// @lenml/tokenizers, run by node) encode the same texts with the same tokenizer.json (GPT-2's
// and Llama 3's, tests/tokenizer_fixtures/); best of 3 after a warm-up for both. Then
// `axonn data prepare`'s pipeline on every core against one thread: its tokens/s per core.
// Texts: the built-in corpus (1 MiB of English-like text, repetitive: the per-word caches
// hit) and 1 MiB of seeded random words and numbers (nearly every word new).
//
// usage: bench_tokenize [--reference NODE_PREFIX]   a folder where `npm install @lenml/tokenizers` ran
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.hpp"
#include "core/wall_clock.hpp"
#include "runner/prepare/documents.hpp"
#include "runner/prepare/prepare_pipeline.hpp"
#include "runner/tokenize/tokenizer.hpp"
#include "subprocess.hpp"
#include "trainer/data/llmc_writer.hpp"
#include "trainer/data/token_data.hpp"

namespace fs = std::filesystem;
using namespace axonn;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string reference = "/tmp/tokref";
};

const std::vector<OptionSpec> kOptions = {
    {"reference", true, "folder where `npm install @lenml/tokenizers` ran (default /tmp/tokref)"},
    {"help", false, "this help"},
};

Options read_options(const Args& args) {
  Options o;
  o.reference = args.value("reference").value_or(o.reference);
  return o;
}

std::string builtin_text() {
  const TokenData corpus = builtin_corpus();
  std::vector<int32_t> ids(static_cast<size_t>(corpus.size()));
  corpus.copy(0, corpus.size(), ids.data());
  return std::string(ids.begin(), ids.end());
}

// ~1 MiB of words of 2-10 random letters, some capitalized, and numbers, in lines.
std::string random_words() {
  std::mt19937_64 rng(20261204);
  std::string text;
  while (text.size() < (size_t{1} << 20)) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind == 0) {
      text += std::to_string(rng() % 100000);
    } else {
      const int letters = 2 + static_cast<int>(rng() % 9);
      for (int i = 0; i < letters; ++i)
        text.push_back(static_cast<char>((i == 0 && kind == 1 ? 'A' : 'a') + static_cast<int>(rng() % 26)));
    }
    text.push_back(rng() % 12 == 0 ? '\n' : ' ');
  }
  return text;
}

template <typename F>
double best_of(int reps, F f) {
  f();  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

struct Rate {
  int64_t tokens = 0;
  double seconds = 0;
  double per_s() const { return static_cast<double>(tokens) / seconds; }
};

Rate reference_rate(const Options& o, const std::string& tokenizer, const std::string& text_path) {
  const std::string script = std::string(AXONN_SOURCE_DIR) + "/bench/tokenize_reference.mjs";
  int status = 0;
  const std::string out =
      bench::run_capture("node " + script + " " + o.reference + " " + tokenizer + " " + text_path + " 2>&1", status);
  Rate r;
  std::istringstream line(out);
  if (status != 0 || !(line >> r.tokens >> r.seconds))
    throw std::runtime_error("the reference failed (install it: mkdir -p " + o.reference + " && cd " + o.reference +
                             " && npm install @lenml/tokenizers):\n" + out);
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = bench::parse_bench_args(argc, argv, kOptions, "bench_tokenize [options]", read_options);
  const fs::path scratch = fs::temp_directory_path() / ("bench-tokenize-" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  const std::vector<std::pair<std::string, std::string>> texts = {{"built-in corpus", builtin_text()},
                                                                  {"random words", random_words()}};
  const std::string fixtures = std::string(AXONN_SOURCE_DIR) + "/tests/tokenizer_fixtures/";

  std::printf("encode, one thread, best of 3 (tokens/s; ratio: axonn over transformers.js)\n");
  std::printf("  %-8s %-16s %9s %14s %16s %7s\n", "model", "text", "tokens", "axonn tok/s", "reference tok/s",
              "ratio");
  for (const char* model : {"gpt2", "llama3"}) {
    const std::string json = fixtures + model + ".tokenizer.json";
    const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(json);
    for (const auto& [name, text] : texts) {
      const fs::path text_path = scratch / "text.txt";
      std::ofstream(text_path, std::ios::binary) << text;
      Rate ours;
      ours.seconds = best_of(3, [&] { ours.tokens = static_cast<int64_t>(tokenizer->encode(text).size()); });
      const Rate theirs = reference_rate(o, json, text_path.string());
      std::printf("  %-8s %-16s %9lld %14.0f %16.0f %6.2fx\n", model, name.c_str(),
                  static_cast<long long>(ours.tokens), ours.per_s(), theirs.per_s(), ours.per_s() / theirs.per_s());
    }
  }

  // The pipeline: 16 documents of the random words, Llama 3's tokenizer, 1 and all cores.
  const std::unique_ptr<Tokenizer> llama = load_tokenizer(fixtures + "llama3.tokenizer.json");
  const fs::path docs = scratch / "docs";
  fs::create_directories(docs);
  for (int d = 0; d < 16; ++d) std::ofstream(docs / ("doc" + std::to_string(100 + d) + ".txt")) << texts[1].second;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("\ndata prepare pipeline, Llama 3, 16 documents of 1 MiB (tokens/s)\n");
  std::printf("  %7s %14s %16s\n", "threads", "tok/s", "tok/s per core");
  double one = 0;
  for (const int threads : {1, cores}) {
    Rate rate;
    rate.seconds = best_of(1, [&] {
      DocumentReader reader(list_inputs({docs.string()}), "text");
      LlmcWriter sink((scratch / "out.bin").string(), llama->vocab_size());
      PrepareOptions options;
      options.threads = threads;
      rate.tokens = prepare_documents(reader, *llama, sink, options).tokens;
    });
    if (threads == 1) one = rate.per_s();
    std::printf("  %7d %14.0f %16.0f  (%.2fx of one thread per core)\n", threads, rate.per_s(),
                rate.per_s() / threads, rate.per_s() / threads / one);
  }
  fs::remove_all(scratch);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_tokenize: %s\n", e.what());
  return 1;
}
