// Gloo collectives on loopback and PMIx bootstrap time.
//   build/bench/bench_comm   (driver: starts itself under `build/bin/axonn run`, as users do)
// 1. Bootstrap: wall time of a local job of 4 and 8 ranks that initialize PMIx, read their
//    topology, connect every group of a 4D layout and exit; goal < 1 s at 8 ranks.
// 2. All-reduce of 4 ranks over message sizes, run as two jobs: Gloo's ring alone
//    (AXONN_GLOO_SMALL_BYTES=0, what every size used before the latency path) and the
//    default (messages up to 64 KiB on the latency path, gloo_small.hpp). Printed side by
//    side with the speedup, bus bandwidth (nccl-tests' definition: busbw = size/time *
//    2(n-1)/n) and a single-process memcpy of the same size measured in the same job (the
//    ceiling every loopback byte pays at least once).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/comm_grid.hpp"
#include "comm/gloo_communicator.hpp"
#include "pmix/topology.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

struct Row {
  size_t bytes = 0;
  int iters = 0;
  double seconds = 0;         // per all-reduce
  double memcpy_seconds = 0;  // per memcpy of the same size
};

// Rank 0 writes one Row per line to `out`.
int worker(const std::string& mode, const std::string& out) {
  axonn::PmixClient client;
  const axonn::Topology topo = axonn::topology_from_pmix(client);
  const axonn::Layout layout = axonn::parse_layout(mode == "bootstrap" ? (topo.world == 8 ? "2x2x1x2" : "1x2x2x1")
                                                                       : std::to_string(topo.world) + "x1x1x1");
  axonn::CommGrid grid(client, layout, std::chrono::milliseconds(60000), true);
  if (mode == "bootstrap") return 0;

  axonn::Communicator& world = grid.world();
  std::FILE* f = topo.rank == 0 ? std::fopen(out.c_str(), "w") : nullptr;
  for (size_t bytes = 64; bytes <= (size_t{64} << 20); bytes *= 4) {
    std::vector<float> buf(bytes / 4, 1.0f), copy(bytes / 4);
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 5, 2000));
    world.all_reduce(buf.data(), buf.size(), axonn::ElementType::float32);  // warm-up
    world.barrier();
    const auto t0 = clock_type::now();
    for (int i = 0; i < iters; ++i) world.all_reduce(buf.data(), buf.size(), axonn::ElementType::float32);
    const double t = seconds_since(t0) / iters;
    const auto c0 = clock_type::now();
    for (int i = 0; i < iters; ++i) {
      std::memcpy(copy.data(), buf.data(), bytes);
      asm volatile("" : : "r"(copy.data()) : "memory");
    }
    const double tc = seconds_since(c0) / iters;
    if (f) std::fprintf(f, "%zu %d %.9g %.9g\n", bytes, iters, t, tc);
  }
  if (f) std::fclose(f);
  return 0;
}

std::vector<Row> read_rows(const std::string& path) {
  std::vector<Row> rows;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    Row r;
    while (std::fscanf(f, "%zu %d %lf %lf", &r.bytes, &r.iters, &r.seconds, &r.memcpy_seconds) == 4) rows.push_back(r);
    std::fclose(f);
  }
  return rows;
}

std::string self_path() {
  char path[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return std::string(path, static_cast<size_t>(std::max<ssize_t>(n, 0)));
}

}  // namespace

int main(int argc, char** argv) {
  if (axonn::pmix_server_in_environment())
    return worker(argc > 1 ? argv[1] : "allreduce", argc > 2 ? argv[2] : "/dev/null");
  const std::string self = self_path();
  const std::string launcher = self.substr(0, self.rfind('/')) + "/../bin/axonn run";
  std::printf("PMIx bootstrap: local launcher start -> every rank connected (4D grid) -> exit\n");
  std::printf("%6s %12s %10s\n", "ranks", "median s", "vs 1 s goal");
  for (int ranks : {4, 8}) {
    std::vector<double> times;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = clock_type::now();
      const int rc = std::system((launcher + " -n " + std::to_string(ranks) + " -- " + self + " bootstrap").c_str());
      times.push_back(seconds_since(t0));
      if (rc != 0) {
        std::fprintf(stderr, "bootstrap job of %d ranks failed\n", ranks);
        return 1;
      }
    }
    std::sort(times.begin(), times.end());
    std::printf("%6d %12.3f %9.2fx\n", ranks, times[2], times[2] / 1.0);
  }
  std::fflush(stdout);

  const std::string ring_file = "/tmp/bench_comm_ring." + std::to_string(getpid());
  const std::string default_file = "/tmp/bench_comm_default." + std::to_string(getpid());
  if (std::system(("AXONN_GLOO_SMALL_BYTES=0 " + launcher + " -n 4 -- " + self + " allreduce " + ring_file).c_str()) !=
          0 ||
      std::system((launcher + " -n 4 -- " + self + " allreduce " + default_file).c_str()) != 0) {
    std::fprintf(stderr, "all-reduce job failed\n");
    return 1;
  }
  const auto ring = read_rows(ring_file), path = read_rows(default_file);
  std::remove(ring_file.c_str());
  std::remove(default_file.c_str());
  if (ring.size() != path.size() || ring.empty()) {
    std::fprintf(stderr, "all-reduce jobs wrote %zu and %zu rows\n", ring.size(), path.size());
    return 1;
  }
  const int n = 4;
  const double factor = axonn::bus_factor(axonn::CollectiveKind::all_reduce, n);
  std::printf("\nGloo all-reduce, %d ranks on loopback (float32): ring only vs default (latency path <= %zu B)\n", n,
              axonn::gloo_small_message_bytes());
  std::printf("%10s %7s %11s %11s %8s %11s %11s %9s\n", "size (B)", "iters", "ring us", "default us", "speedup",
              "busbw GB/s", "memcpy GB/s", "vs memcpy");
  for (size_t i = 0; i < ring.size(); ++i) {
    const double busbw = static_cast<double>(path[i].bytes) / path[i].seconds * factor / 1e9;
    const double memcpy_bw = static_cast<double>(path[i].bytes) / path[i].memcpy_seconds / 1e9;
    std::printf("%10zu %7d %11.1f %11.1f %7.2fx %11.3f %11.3f %8.3fx\n", path[i].bytes, path[i].iters,
                ring[i].seconds * 1e6, path[i].seconds * 1e6, ring[i].seconds / path[i].seconds, busbw, memcpy_bw,
                busbw / memcpy_bw);
  }
  return 0;
}
