// The data pipeline's two hot paths, each against a reference measured in the same run:
//   1. TokenData::load of a 100 MB llm.c token file (50M uint16 tokens -> int32) against a
//      plain read() of the same file into one buffer (the file is in the page cache for both:
//      this measures the parse, not the disk); goal: well under 1 s.
//   2. a step's samples (DataMixture::take and read: the schedule, each source's shuffled
//      order, the copy), of one source and of a mixture of three, against std::memcpy of the
//      same bytes from consecutive memory (what reading them would cost with no shuffle and
//      no mixture at all).
//
// usage: bench_data [DIR] [--tokens N]   DIR (default: the temp folder) gets one file, removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_args.hpp"
#include "core/wall_clock.hpp"
#include "trainer/data/data_mixture.hpp"
#include "trainer/data/token_data.hpp"
#include "trainer/data/token_file.hpp"

namespace fs = std::filesystem;
using namespace axonn;
using Clock = std::chrono::steady_clock;

namespace {

// Best of `reps` runs of f, in seconds.
template <typename F>
double best_of(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

size_t plain_read(const std::string& path, std::vector<unsigned char>& buffer) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  size_t done = 0;
  for (ssize_t got; (got = ::read(fd, buffer.data() + done, buffer.size() - done)) > 0;)
    done += static_cast<size_t>(got);
  ::close(fd);
  return done;
}

struct Options {
  fs::path dir;
  int64_t tokens = 50'000'000;  // 100 MB of uint16
};

Options read_options(const Args& args) {
  Options o;
  o.dir = bench::optional_dir(args).value_or(fs::temp_directory_path().string());
  o.tokens = args.integer("tokens", 2, 1L << 40).value_or(o.tokens);
  return o;
}

const std::vector<OptionSpec> kOptions = {
    {"tokens", true, "tokens in the file (default 50000000: 100 MB of uint16)"},
    {"help", false, "this help"},
};

}  // namespace

int main(int argc, char** argv) {
  const auto [dir, tokens] = bench::parse_bench_args(
      argc, argv, kOptions, "bench_data [DIR] [options]   (DIR default: the temp folder)", read_options);
  const std::string path = (dir / ("bench-data-" + std::to_string(::getpid()) + ".bin")).string();
  {
    std::vector<int32_t> ids(static_cast<size_t>(tokens));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 2654435761u) % 50257);
    write_llmc_file(path, ids);
  }
  const auto file_bytes = static_cast<size_t>(fs::file_size(path));

  std::vector<unsigned char> raw(file_bytes);
  plain_read(path, raw);  // warm the page cache
  const double t_read = best_of(3, [&] { plain_read(path, raw); });
  int64_t loaded = 0;
  const double t_load = best_of(3, [&] { loaded = TokenData::load({path, "auto"}).size(); });
  fs::remove(path);
  std::printf("load: %.1f MB llm.c file, %lld tokens (page cache)\n", static_cast<double>(file_bytes) / 1e6,
              static_cast<long long>(loaded));
  std::printf("  %-28s %10s %12s\n", "", "seconds", "ratio");
  std::printf("  %-28s %10.3f %12s\n", "plain read() of the file", t_read, "1.00x");
  std::printf("  %-28s %10.3f %11.2fx\n", "TokenData::load", t_load, t_load / t_read);
  std::printf("  TokenData::load vs the 1 s goal: %.2fx\n\n", t_load / 1.0);

  const auto corpus = std::make_shared<const TokenData>(builtin_corpus());
  const int64_t third = corpus->size() / 3;
  std::vector<int32_t> flat(static_cast<size_t>(corpus->size()));  // the memcpy reference's source
  corpus->copy(0, corpus->size(), flat.data());
  std::printf("a step's samples from the built-in corpus vs memcpy of the same bytes (contiguous):\n");
  std::printf("  %-9s %8s %6s %12s %10s %8s\n", "data", "samples", "T", "samples us", "memcpy us", "ratio");
  for (const auto& [count, sequence] : {std::pair{12, 64}, std::pair{64, 1024}, std::pair{512, 1024}}) {
    const DataMixture one = DataMixture::single(corpus, 1337, sequence);
    const DataMixture three({{corpus, 0, third, 0.5}, {corpus, third, third, 0.3}, {corpus, 2 * third, third, 0.2}},
                            1337, sequence);
    const size_t n = static_cast<size_t>(count) * static_cast<size_t>(sequence);
    std::vector<int32_t> in(n), tg(n);
    const int reps = 200;
    const double t_copy = best_of(5, [&] {
      for (int r = 0; r < reps; ++r) {
        std::memcpy(in.data(), flat.data() + (r % 8) * 1024, n * sizeof(int32_t));
        std::memcpy(tg.data(), flat.data() + (r % 8) * 1024 + 1, n * sizeof(int32_t));
      }
    });
    for (const auto& [name, data] : {std::pair{"1 source", &one}, std::pair{"mixture 3", &three}}) {
      MixtureCursor cursor = data->start();
      const double t_samples = best_of(5, [&] {
        for (int r = 0; r < reps; ++r) {
          const std::vector<SampleRef> refs = data->take(cursor, count);
          data->read(refs.data(), count, in.data(), tg.data());
        }
      });
      std::printf("  %-9s %8d %6d %12.2f %10.2f %7.2fx\n", name, count, sequence, t_samples / reps * 1e6,
                  t_copy / reps * 1e6, t_samples / t_copy);
    }
  }
  return 0;
}
