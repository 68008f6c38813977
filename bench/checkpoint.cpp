// Checkpoint save and load of a ~1 GiB float32 state split over 4 ranks (4 processes, like 4
// ranks on one node, writing and reading their shards concurrently), against plain POSIX
// writes and reads of the same bytes on the same disk in the same run, fsync on both sides.
// Also: reshard loads (another tiling) against same-layout loads, for both read paths, and
// the async save's stall (the host copy) against a blocking save.
//
// usage: bench_checkpoint [DIR] [--reps N] [--rows R] [--cols C] [--tensors T]
//   DIR (default ./bench-checkpoint-data) must not be on tmpfs; it is deleted at the end.
// Page cache: before every read the bench runs `sync; echo 3 > /proc/sys/vm/drop_caches`
// and says whether that worked (else both sides read from the page cache alike).
// Read phases run in a rotated order, one phase later each repetition.
#include <fcntl.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "checkpoint/async_saver.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/reader.hpp"
#include "checkpoint/shard_writer.hpp"
#include "checkpoint/step_dir.hpp"

namespace fs = std::filesystem;
using namespace axonn;
using axonn::bench::optional_dir;
using axonn::bench::parse_bench_args;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanks = 4;
constexpr size_t kChunk = size_t{64} << 20;  // plain I/O call size

struct Options {
  fs::path dir = "bench-checkpoint-data";
  int reps = 3;
  int64_t rows = 8192, cols = 4096;  // per tensor: 128 MiB
  int tensors = 8;                   // 8 x 128 MiB = 1 GiB
};

float value(int tensor, int64_t index) {
  return static_cast<float>(tensor) * 1000.0f + static_cast<float>(index % 100003) * 0.5f;
}

// Tilings of every [rows, cols] weight over the 4 ranks.
enum class Tiling { blocks, rows, cols };
const char* tiling_name(Tiling t) {
  return t == Tiling::blocks ? "2x2 blocks" : t == Tiling::rows ? "4 row tiles" : "4 column tiles";
}
Rect tile(Tiling t, int64_t rows, int64_t cols, int rank) {
  switch (t) {
    case Tiling::blocks:
      return Rect{{(rank / 2) * rows / 2, (rank % 2) * cols / 2}, {rows / 2, cols / 2}};
    case Tiling::rows:
      return Rect{{rank * rows / 4, 0}, {rows / 4, cols}};
    case Tiling::cols:
      return Rect{{0, rank * cols / 4}, {rows, cols / 4}};
  }
  throw std::logic_error("tiling");
}

std::string tensor_name(int t) { return "layers/" + std::to_string(t) + "/w"; }

// One rank's slices of every tensor, filled with the global values.
struct RankData {
  std::vector<std::vector<float>> buffers;
  std::vector<TensorSlice> slices;
};
RankData rank_data(const Options& o, Tiling tiling, int rank) {
  RankData d;
  for (int t = 0; t < o.tensors; ++t) {
    const Rect r = tile(tiling, o.rows, o.cols, rank);
    std::vector<float> buf(static_cast<size_t>(element_count(r)));
    for (int64_t i = 0; i < r.count[0]; ++i) {
      for (int64_t j = 0; j < r.count[1]; ++j) {
        buf[static_cast<size_t>(i * r.count[1] + j)] = value(t, (r.offset[0] + i) * o.cols + r.offset[1] + j);
      }
    }
    d.buffers.push_back(std::move(buf));
    d.slices.push_back(TensorSlice{tensor_name(t), {o.rows, o.cols}, r, d.buffers.back().data()});
  }
  return d;
}

// steady_clock is CLOCK_MONOTONIC: one clock for all processes of the machine.
double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// What a bench process reports: when its timed work ended, and up to two numbers.
struct Done {
  double end = 0;
  double value = 0;
  double extra = 0;
};

// Runs body(rank, ready) in `procs` forked processes. Each child prepares, calls ready()
// (which blocks until every child is ready and the parent says go), does the timed work and
// returns Done{now_s(), value} before any untimed checking. Returns the wall time from "go"
// to the last child's end of timed work, and each child's value.
struct PhaseResult {
  double wall = 0;
  std::vector<double> values, extras;
};
PhaseResult run_procs(int procs, const std::function<Done(int, const std::function<void()>&)>& body) {
  int ready_pipe[2], go_pipe[2], result_pipe[2];
  if (pipe(ready_pipe) || pipe(go_pipe) || pipe(result_pipe)) throw std::runtime_error("pipe failed");
  std::vector<pid_t> pids;
  for (int r = 0; r < procs; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      close(ready_pipe[0]);
      close(go_pipe[1]);
      close(result_pipe[0]);
      auto ready = [&] {
        char c = 'r';
        if (write(ready_pipe[1], &c, 1) != 1 || read(go_pipe[0], &c, 1) != 1) _exit(20);
      };
      Done v;
      try {
        v = body(r, ready);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench rank %d failed: %s\n", r, e.what());
        _exit(21);
      }
      struct {
        int rank;
        Done d;
      } msg{r, v};
      if (write(result_pipe[1], &msg, sizeof msg) != static_cast<ssize_t>(sizeof msg)) _exit(22);
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(ready_pipe[1]);
  close(go_pipe[0]);
  close(result_pipe[1]);
  for (int r = 0; r < procs; ++r) {
    char c;
    if (read(ready_pipe[0], &c, 1) != 1) throw std::runtime_error("a bench process died while preparing");
  }
  const double t0 = now_s();
  for (int r = 0; r < procs; ++r) {
    char c = 'g';
    if (write(go_pipe[1], &c, 1) != 1) throw std::runtime_error("cannot start bench processes");
  }
  PhaseResult res;
  res.values.assign(static_cast<size_t>(procs), 0.0);
  res.extras.assign(static_cast<size_t>(procs), 0.0);
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  for (int r = 0; r < procs; ++r) {
    struct {
      int rank;
      Done d;
    } msg{};
    if (read(result_pipe[0], &msg, sizeof msg) == static_cast<ssize_t>(sizeof msg)) {
      res.values[static_cast<size_t>(msg.rank)] = msg.d.value;
      res.extras[static_cast<size_t>(msg.rank)] = msg.d.extra;
      res.wall = std::max(res.wall, msg.d.end - t0);
    }
  }
  close(ready_pipe[0]);
  close(go_pipe[1]);
  close(result_pipe[0]);
  if (!ok) throw std::runtime_error("a bench process failed (see its message above)");
  return res;
}

bool drop_caches() {
  sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  return static_cast<bool>(f);
}

// A tiny checkpoint, read after every cache drop so that the code pages of libhdf5 and
// libxxhash are back in memory (a resumed job finds its libraries cached too): only the
// benchmark's data is cold.
void write_warmup(const fs::path& dir) {
  std::vector<float> v(16, 1.0f);
  const std::vector<TensorSlice> s = {TensorSlice{"w", {16}, Rect{{0}, {16}}, v.data()}};
  write_shard(dir, 1, 0, s);
  commit(dir, 1, std::vector<int>{0}, Metadata{}, 1, std::chrono::seconds(10));
}
void read_warmup(const fs::path& dir) {
  std::vector<float> v(16);
  CheckpointReader(step_path(dir, 1)).read("w", Rect{{0}, {16}}, v.data());
  CheckpointReader(step_path(dir, 1)).read("w", Rect{{0}, {16}}, v.data(), ReadOptions{ReadPath::index_vds, true});
}

void fsync_path(const fs::path& p, int flags) {
  const int fd = open(p.c_str(), flags);
  if (fd < 0 || fsync(fd) != 0) throw std::runtime_error("fsync " + p.string() + ": " + std::strerror(errno));
  close(fd);
}

// Plain reference: write `bytes` from memory to one file in 64 MiB calls, fsync file and dir.
void plain_write(const fs::path& path, const char* data, size_t bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path.string() + ": " + std::strerror(errno));
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = write(fd, data + done, std::min(kChunk, bytes - done));
    if (n <= 0) throw std::runtime_error("write " + path.string() + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) throw std::runtime_error("fsync " + path.string());
  close(fd);
  fsync_path(path.parent_path(), O_RDONLY | O_DIRECTORY);
}

void plain_read(const fs::path& path, char* data, size_t bytes) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("open " + path.string() + ": " + std::strerror(errno));
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = read(fd, data + done, std::min(kChunk, bytes - done));
    if (n <= 0) throw std::runtime_error("read " + path.string() + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  close(fd);
}

// Every element a rank loaded equals the global value (after the timed part).
void check_loaded(const Options& o, const std::vector<std::vector<float>>& bufs, Tiling tiling, int rank) {
  for (int t = 0; t < o.tensors; ++t) {
    const Rect r = tile(tiling, o.rows, o.cols, rank);
    for (int64_t i = 0; i < r.count[0]; ++i) {
      for (int64_t j = 0; j < r.count[1]; ++j) {
        if (bufs[static_cast<size_t>(t)][static_cast<size_t>(i * r.count[1] + j)] !=
            value(t, (r.offset[0] + i) * o.cols + r.offset[1] + j)) {
          throw std::runtime_error("loaded value differs: tensor " + std::to_string(t) + " " + rect_string(r));
        }
      }
    }
  }
}

using axonn::bench::median;

// "min..max" of the repetitions, to show the spread behind a median.
std::string spread(const std::vector<double>& v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "(%.3f..%.3f)", *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return buf;
}

struct Row {
  std::string name;
  std::vector<double> times;
  double bytes;
  double seconds() const { return median(times); }
};
void print_row(const Row& r, const Row* ref, const char* goal) {
  std::printf("  %-48s %7.3f s %-15s %6.2f GB/s", r.name.c_str(), r.seconds(), spread(r.times).c_str(),
              r.bytes / r.seconds() / 1e9);
  if (ref) std::printf("  %5.2fx of %s", ref->seconds() / r.seconds(), goal);
  std::printf("\n");
}

Options read_options(const Args& args) {
  Options o;
  if (const auto dir = optional_dir(args)) o.dir = *dir;
  o.reps = static_cast<int>(args.integer("reps", 1, 1000).value_or(o.reps));
  o.rows = args.integer("rows", 2, 1L << 30).value_or(o.rows);
  o.cols = args.integer("cols", 2, 1L << 30).value_or(o.cols);
  o.tensors = static_cast<int>(args.integer("tensors", 1, 1 << 20).value_or(o.tensors));
  return o;
}

const std::vector<OptionSpec> kOptions = {
    {"reps", true, "repetitions of every measurement (default 3)"},
    {"rows", true, "rows of every tensor (default 8192)"},
    {"cols", true, "columns of every tensor (default 4096)"},
    {"tensors", true, "tensors in the state (default 8: 8 x 128 MiB = 1 GiB)"},
    {"help", false, "this help"},
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_bench_args(
      argc, argv, kOptions, "bench_checkpoint [DIR] [options]   (DIR default ./bench-checkpoint-data, not on tmpfs)",
      read_options);
  fs::remove_all(o.dir);
  fs::create_directories(o.dir);
  struct statfs sfs {};
  statfs(o.dir.c_str(), &sfs);
  if (static_cast<unsigned long>(sfs.f_type) == 0x01021994UL) {
    std::fprintf(stderr, "%s is on tmpfs: pick a directory on a disk\n", o.dir.c_str());
    return 2;
  }
  const size_t total = static_cast<size_t>(o.rows * o.cols * o.tensors) * sizeof(float);
  const double bytes = static_cast<double>(total);
  const fs::path ckpt = o.dir / "ckpt";
  const bool dropped = drop_caches();
  std::printf(
      "checkpoint bench: %d tensors [%lld, %lld] float32 = %.2f GiB over %d ranks (processes), %d reps (median)\n",
      o.tensors, static_cast<long long>(o.rows), static_cast<long long>(o.cols), bytes / (1 << 30), kRanks, o.reps);
  std::printf("dir %s (fs magic 0x%lx); page cache dropped before reads: %s\n", fs::absolute(o.dir).c_str(),
              static_cast<unsigned long>(sfs.f_type),
              dropped ? "yes" : "NO (reads are from the page cache, both sides alike)");

  // ---- writes ----
  std::vector<double> plain1, plain4, save, async_stall, async_first, async_total;
  int64_t step = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    plain1.push_back(run_procs(1, [&](int, const std::function<void()>& ready) {
                       std::vector<float> all(total / 4);
                       for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(i);
                       ready();
                       plain_write(o.dir / "plain.bin", reinterpret_cast<const char*>(all.data()), total);
                       return Done{now_s(), 0, 0};
                     }).wall);
    plain4.push_back(run_procs(kRanks, [&](int rank, const std::function<void()>& ready) {
                       std::vector<float> part(total / 4 / kRanks, static_cast<float>(rank));
                       ready();
                       plain_write(o.dir / ("plain-" + std::to_string(rank) + ".bin"),
                                   reinterpret_cast<const char*>(part.data()), total / kRanks);
                       return Done{now_s(), 0, 0};
                     }).wall);
    ++step;
    save.push_back(run_procs(kRanks, [&](int rank, const std::function<void()>& ready) {
                     RankData d = rank_data(o, Tiling::blocks, rank);
                     ready();
                     write_shard(ckpt, step, rank, d.slices);
                     if (rank == 0)
                       commit(ckpt, step, std::vector<int>{0, 1, 2, 3}, Metadata{}, 2, std::chrono::minutes(5));
                     return Done{now_s(), 0, 0};
                   }).wall);
    // Async: a saver's first save allocates its host buffers; later saves reuse them (the
    // steady state of a training run). Timed: the second save, from save() to committed.
    step += 2;
    const PhaseResult a = run_procs(kRanks, [&](int rank, const std::function<void()>& ready) {
      RankData d = rank_data(o, Tiling::blocks, rank);
      SaverOptions options;
      options.commit_timeout = std::chrono::minutes(5);
      AsyncSaver saver(ckpt, rank, options);
      auto commit_spec = [&] {
        return rank == 0 ? std::optional<CommitSpec>(CommitSpec{{0, 1, 2, 3}, Metadata{}}) : std::nullopt;
      };
      saver.save(step - 1, d.slices, commit_spec());
      saver.wait();
      const double first_stall = std::chrono::duration<double>(saver.last_copy()).count();
      ready();
      saver.save(step, d.slices, commit_spec());
      const double stall = std::chrono::duration<double>(saver.last_wait() + saver.last_copy()).count();
      saver.wait();
      return Done{now_s(), stall, first_stall};
    });
    async_stall.push_back(*std::max_element(a.values.begin(), a.values.end()));
    async_first.push_back(*std::max_element(a.extras.begin(), a.extras.end()));
    async_total.push_back(a.wall);
  }

  // ---- reads ----
  run_procs(1, [&](int, const std::function<void()>& ready) {
    write_warmup(o.dir / "warmup");
    ready();
    return Done{now_s(), 0, 0};
  });
  auto cold = [&] {
    drop_caches();
    run_procs(1, [&](int, const std::function<void()>& ready) {
      read_warmup(o.dir / "warmup");
      ready();
      return Done{now_s(), 0, 0};
    });
  };
  auto plain_read_phase = [&](int procs) {
    cold();
    return run_procs(procs,
                     [&](int rank, const std::function<void()>& ready) {
                       const size_t n = total / static_cast<size_t>(procs);
                       std::vector<char> buf(n, 1);
                       ready();
                       plain_read(procs == 1 ? o.dir / "plain.bin" : o.dir / ("plain-" + std::to_string(rank) + ".bin"),
                                  buf.data(), n);
                       return Done{now_s(), 0, 0};
                     })
        .wall;
  };
  auto load_phase = [&](Tiling tiling, ReadOptions ro) {
    cold();
    return run_procs(kRanks, [&](int rank, const std::function<void()>& ready) {
      std::vector<std::vector<float>> bufs;
      for (int t = 0; t < o.tensors; ++t)
        bufs.emplace_back(static_cast<size_t>(element_count(tile(tiling, o.rows, o.cols, rank))), -1.0f);
      ready();
      CheckpointReader reader = CheckpointReader::open_latest(ckpt);
      for (int t = 0; t < o.tensors; ++t) {
        reader.read(SliceRead{tensor_name(t),
                              {o.rows, o.cols},
                              tile(tiling, o.rows, o.cols, rank),
                              bufs[static_cast<size_t>(t)].data()},
                    ro);
      }
      const Done done{now_s(), static_cast<double>(reader.bytes_read()), 0};
      check_loaded(o, bufs, tiling, rank);  // after the timed part
      return done;
    });
  };
  std::vector<double> read1, read4;
  struct LoadCase {
    std::string name;
    Tiling tiling;
    ReadOptions ro;
    std::vector<double> times;
    double read_bytes = 0;
  };
  std::vector<LoadCase> loads = {
      {"load same layout, shards (verified)", Tiling::blocks, {ReadPath::shards, true}, {}},
      {"load same layout, index VDS", Tiling::blocks, {ReadPath::index_vds, true}, {}},
      {"load same layout, shards unverified", Tiling::blocks, {ReadPath::shards, false}, {}},
      {"reshard to row tiles, shards (verified)", Tiling::rows, {ReadPath::shards, true}, {}},
      {"reshard to row tiles, index VDS", Tiling::rows, {ReadPath::index_vds, true}, {}},
      {"reshard to column tiles, shards (verified)", Tiling::cols, {ReadPath::shards, true}, {}},
      {"reshard to column tiles, index VDS", Tiling::cols, {ReadPath::index_vds, true}, {}},
      {"reshard to column tiles, shards unverified", Tiling::cols, {ReadPath::shards, false}, {}},
  };
  // Every read phase once per repetition, starting one phase later each time: what a phase
  // leaves behind on this shared machine (reclaim, the host's caches) then falls on a
  // different neighbour each repetition instead of always on the same one.
  std::vector<std::function<void()>> phases = {[&] { read1.push_back(plain_read_phase(1)); },
                                               [&] { read4.push_back(plain_read_phase(kRanks)); }};
  for (LoadCase& c : loads) {
    phases.push_back([&] {
      const PhaseResult r = load_phase(c.tiling, c.ro);
      c.times.push_back(r.wall);
      c.read_bytes = 0;
      for (double v : r.values) c.read_bytes += v;
    });
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    for (size_t k = 0; k < phases.size(); ++k) phases[(static_cast<size_t>(rep) + k) % phases.size()]();
  }

  // ---- report ----
  std::printf("\nwrites (fsync included; ratio = reference time / time, goal >= 0.8x):\n");
  const Row w1{"plain write, 1 process, 1 file", plain1, bytes};
  const Row w4{"plain write, 4 processes, 4 files", plain4, bytes};
  const Row sv{"checkpoint save, 4 ranks (shards+index+commit)", save, bytes};
  print_row(w1, nullptr, "");
  print_row(w4, nullptr, "");
  print_row(sv, &w1, "plain 1-process write");
  std::printf("  %-48s %7s   %-15s %11s  %5.2fx of plain 4-process write\n", "", "", "", "",
              w4.seconds() / sv.seconds());

  std::printf("\nasync save (4 ranks; stall = the longest save() call, i.e. the copy into host buffers):\n");
  std::printf("  %-48s %7.3f s %s\n", "first save of a saver (allocates buffers): stall", median(async_first),
              spread(async_first).c_str());
  std::printf("  %-48s %7.3f s %s\n", "later saves (buffers reused): stall", median(async_stall),
              spread(async_stall).c_str());
  std::printf("  %-48s %7.3f s %s\n", "later saves: save() to written and committed", median(async_total),
              spread(async_total).c_str());
  std::printf("  %-48s %7.3f s   stall = %.3fx of the blocking save\n", "blocking save (above)", sv.seconds(),
              median(async_stall) / sv.seconds());

  std::printf("\nreads (%s; ratio = reference time / time, goal >= 0.8x):\n",
              dropped ? "cold page cache" : "page cache NOT dropped");
  const Row r1{"plain read, 1 process, 1 file", read1, bytes};
  const Row r4{"plain read, 4 processes, 4 files", read4, bytes};
  print_row(r1, nullptr, "");
  print_row(r4, nullptr, "");
  for (const LoadCase& c : loads) {
    const Row row{c.name, c.times, bytes};
    print_row(row, &r1, "plain 1-process read");
  }
  std::printf("\nreshard vs same-layout load (ratio = reshard time / same-layout time, goal <= 1.2x):\n");
  auto find = [&](const std::string& n) -> const LoadCase& {
    for (const LoadCase& c : loads)
      if (c.name == n) return c;
    throw std::logic_error(n);
  };
  const LoadCase& same_shards = find("load same layout, shards (verified)");
  const LoadCase& same_vds = find("load same layout, index VDS");
  for (const LoadCase& c : loads) {
    if (c.tiling == Tiling::blocks) continue;
    const LoadCase& base = c.ro.path == ReadPath::index_vds ? same_vds : same_shards;
    std::printf("  %-48s %5.2fx  (read %.2f GiB from shard files for %.2f GiB wanted)\n", c.name.c_str(),
                median(c.times) / median(base.times), c.read_bytes / (1 << 30), bytes / (1 << 30));
  }
  std::printf("\nsaved as %s; every loaded value checked after the timed part\n", tiling_name(Tiling::blocks));
  fs::remove_all(o.dir);
  return 0;
}
