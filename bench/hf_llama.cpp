// axonn ckpt import-hf and export-hf of a Llama-shaped model (~0.6 GiB float32 by default)
// against a plain copy of the same bytes on the same disk in the same run: the copy reads the
// model's safetensors in 64 MiB calls and writes them to a new file, fsync; the import reads
// the same file and writes the checkpoint (HDF5 shards with checksums, index, commit); the
// export reads the checkpoint (checksums verified) and writes safetensors again. Rounds
// alternate the three, a new rotation each round; the page cache is as the previous phase
// left it for all three alike. Also each command's peak RSS (wait4) against the model's bytes
// and its largest tensor's: an import streams tensor by tensor.
//
// usage: bench_hf_llama [DIR] [--reps N] [--layers L] [--hidden C] [--heads H] [--kv-heads KV]
//                       [--mlp-hidden F] [--vocab V]
//   DIR (default ./bench-hf-llama-data) is deleted at the end.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "checkpoint/rect.hpp"
#include "checkpoint/safetensors_writer.hpp"
#include "runner/hf/hf_config.hpp"
#include "runner/hf/llama_tensors.hpp"

namespace fs = std::filesystem;
using namespace axonn;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  fs::path dir = "bench-hf-llama-data";
  int reps = 3;
  ModelShape model;
};

// 8 layers of a Llama 3 block at hidden 1024 with 32000 tokens: 0.16 B parameters, 0.6 GiB.
ModelShape default_model() {
  ModelShape m;
  m.layers = 8;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 4;
  m.vocab = 32000;
  m.sequence = 256;
  m.norm = Norm::rmsnorm;
  m.mlp = Mlp::swiglu;
  m.mlp_hidden = 2816;
  m.positions = Positions::rope;
  m.rope_theta = 500000.0;
  m.bias = false;
  m.tie_embeddings = false;
  return m;
}

std::string job_toml(const ModelShape& m) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return "[model]\nlayers = " + n(m.layers) + "\nhidden = " + n(m.hidden) + "\nheads = " + n(m.heads) +
         "\nkv_heads = " + n(m.kv()) + "\nvocab = " + n(m.vocab) + "\nsequence = " + n(m.sequence) +
         "\nnorm = \"rmsnorm\"\nmlp = \"swiglu\"\nmlp_hidden = " + n(m.ffn()) +
         "\npositions = \"rope\"\nrope_theta = 500000.0\nbias = false\ntie_embeddings = false\n";
}

// The model directory: config.json and one model.safetensors of deterministic values.
// Returns the largest tensor's bytes.
int64_t write_model(const fs::path& dir, const ModelShape& m) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << write_hf_config(m);
  std::vector<SafetensorsEntry> entries;
  int64_t largest = 0;
  for (const HfTensor& t : hf_llama_tensors(m)) {
    entries.push_back({t.name, t.shape});
    largest = std::max(largest, 4 * element_count(t.shape));
  }
  SafetensorsWriter writer(dir / "model.safetensors", entries, {{"format", "pt"}});
  std::vector<float> chunk(size_t{1} << 20);
  uint32_t state = 12345;
  int64_t left = writer.data_bytes() / 4;
  while (left > 0) {
    const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(chunk.size()));
    for (int64_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      chunk[static_cast<size_t>(i)] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    }
    writer.append(chunk.data(), n);
    left -= n;
  }
  writer.finish();
  return largest;
}

// Plain reference: `from` copied to `to` in 64 MiB read()/write() calls, fsync.
void plain_copy(const fs::path& from, const fs::path& to) {
  const int in = ::open(from.c_str(), O_RDONLY);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || out < 0) throw std::runtime_error("open for the plain copy: " + std::string(std::strerror(errno)));
  std::vector<char> buf(size_t{64} << 20);
  for (ssize_t got; (got = ::read(in, buf.data(), buf.size())) > 0;)
    if (::write(out, buf.data(), static_cast<size_t>(got)) != got) throw std::runtime_error("plain copy: short write");
  if (::fsync(out) != 0) throw std::runtime_error("plain copy: fsync");
  ::close(in);
  ::close(out);
}

struct Timed {
  double seconds = 0;
  int64_t peak_rss = 0;  // bytes, of the child
};

// Runs axonn with `args` (output to DIR/log), waiting with wait4 for its own rusage.
Timed run_axonn(const std::vector<std::string>& args, const fs::path& log) {
  const std::string axonn = std::string(AXONN_BINARY_DIR) + "/bin/axonn";
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv{const_cast<char*>(axonn.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(axonn.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  Timed t{std::chrono::duration<double>(Clock::now() - start).count(), int64_t{usage.ru_maxrss} * 1024};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("axonn " + args[0] + " " + args[1] + " failed; see " + log.string());
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"reps", true, "rounds of copy, import and export (default 3)"},
      {"layers", true, "default 8"},
      {"hidden", true, "default 1024"},
      {"heads", true, "default 16"},
      {"kv-heads", true, "default 4"},
      {"mlp-hidden", true, "default 2816"},
      {"vocab", true, "default 32000"},
      {"help", false, "this help"},
  };
  const Options o = bench::parse_bench_args(argc, argv, specs, "bench_hf_llama [DIR] [options]", [](const Args& a) {
    Options r;
    if (auto dir = bench::optional_dir(a)) r.dir = *dir;
    r.reps = bench::count_option(a, "reps", r.reps);
    r.model = default_model();
    r.model.layers = bench::count_option(a, "layers", r.model.layers);
    r.model.hidden = bench::count_option(a, "hidden", r.model.hidden);
    r.model.heads = bench::count_option(a, "heads", r.model.heads);
    r.model.kv_heads = bench::count_option(a, "kv-heads", r.model.kv_heads);
    r.model.mlp_hidden = bench::count_option(a, "mlp-hidden", r.model.mlp_hidden);
    r.model.vocab = bench::count_option(a, "vocab", r.model.vocab);
    return r;
  });
  try {
    fs::remove_all(o.dir);
    const fs::path model = o.dir / "model", job = o.dir / "job.toml", log = o.dir / "axonn.log";
    const int64_t largest = write_model(model, o.model);
    std::ofstream(job) << job_toml(o.model);
    const int64_t bytes = static_cast<int64_t>(fs::file_size(model / "model.safetensors"));
    std::printf("model: %d layers, hidden %d, %d heads (%d kv), mlp %lld, vocab %d: %.2f GiB float32 in %s; largest "
                "tensor %.0f MiB; %d rounds\n",
                o.model.layers, o.model.hidden, o.model.heads, static_cast<int>(o.model.kv()), static_cast<long long>(o.model.ffn()),
                o.model.vocab, static_cast<double>(bytes) / (1 << 30), (model / "model.safetensors").c_str(),
                static_cast<double>(largest) / (1 << 20), o.reps);

    std::vector<double> copy_s, import_s, export_s;
    int64_t import_rss = 0, export_rss = 0;
    for (int rep = 0; rep < o.reps; ++rep) {
      for (int phase = 0; phase < 3; ++phase) {
        switch ((phase + rep) % 3) {
          case 0: {
            fs::remove(o.dir / "copy.safetensors");
            const auto start = Clock::now();
            plain_copy(model / "model.safetensors", o.dir / "copy.safetensors");
            copy_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
            break;
          }
          case 1: {
            fs::remove_all(o.dir / "ckpt");
            const Timed t = run_axonn(
                {"ckpt", "import-hf", model.string(), "--job", job.string(), "-o", (o.dir / "ckpt").string()}, log);
            import_s.push_back(t.seconds);
            import_rss = std::max(import_rss, t.peak_rss);
            break;
          }
          default: {
            if (!fs::exists(o.dir / "ckpt"))  // the export reads the import's checkpoint
              run_axonn({"ckpt", "import-hf", model.string(), "--job", job.string(), "-o", (o.dir / "ckpt").string()},
                        log);
            fs::remove_all(o.dir / "export");
            const Timed t = run_axonn({"ckpt", "export-hf", (o.dir / "ckpt").string(), "-o", (o.dir / "export").string()}, log);
            export_s.push_back(t.seconds);
            export_rss = std::max(export_rss, t.peak_rss);
          }
        }
      }
    }
    const double copy = bench::quantile(copy_s, 0.5), gb = static_cast<double>(bytes) / 1e9;
    auto row = [&](const char* what, const std::vector<double>& s, const std::string& extra) {
      const double median = bench::quantile(s, 0.5);
      std::printf("  %-34s %7.3f s (%.3f..%.3f) %6.2f GB/s  %5.2fx of the copy's time%s\n", what, median,
                  *std::min_element(s.begin(), s.end()), *std::max_element(s.begin(), s.end()), gb / median,
                  median / copy, extra.c_str());
    };
    auto rss = [&](int64_t peak) {
      char text[160];
      std::snprintf(text, sizeof text, "\n  %34s peak RSS %.0f MiB = %.2fx the largest tensor, %.2fx the model", "",
                    static_cast<double>(peak) / (1 << 20), static_cast<double>(peak) / static_cast<double>(largest),
                    static_cast<double>(peak) / static_cast<double>(bytes));
      return std::string(text);
    };
    std::printf("medians (min..max); goal: import and export each <= 3x of the copy's time, peak RSS < the model\n");
    row("plain copy (read, write, fsync)", copy_s, "");
    row("axonn ckpt import-hf", import_s, rss(import_rss));
    row("axonn ckpt export-hf", export_s, rss(export_rss));
    fs::remove_all(o.dir);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_hf_llama: %s\n", e.what());
    return 1;
  }
}
