// Gloo collectives on loopback and PMIx bootstrap time.
//   build/bench/bench_comm   (driver: starts itself under `build/bin/axonn run`, as users do)
// 1. Bootstrap: wall time of a local job of 4 and 8 ranks that initialize PMIx, read their
//    topology, connect every group of a 4D layout and exit; goal < 1 s at 8 ranks.
// 2. All-reduce bus bandwidth for 4 ranks over message sizes (nccl-tests' definition:
//    busbw = size/time * 2(n-1)/n), beside a single-process memcpy of the same size
//    measured in the same run (the ceiling every loopback byte pays at least once).
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
#include "pmix/topology.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

int worker(const std::string& mode) {
  axonn::PmixClient client;
  const axonn::Topology topo = axonn::topology_from_pmix(client);
  const axonn::Layout layout =
      axonn::parse_layout(mode == "bootstrap" ? (topo.world == 8 ? "2x2x1x2" : "1x2x2x1") : std::to_string(topo.world) + "x1x1x1");
  axonn::CommGrid grid(client, layout, std::chrono::milliseconds(60000), true);
  if (mode == "bootstrap") return 0;

  axonn::Communicator& world = grid.world();
  const int n = world.size();
  if (topo.rank == 0)
    std::printf("%12s %8s %12s %12s %14s %8s\n", "size (B)", "iters", "time (us)", "busbw GB/s", "memcpy GB/s", "ratio");
  for (size_t bytes = 4096; bytes <= (size_t{64} << 20); bytes *= 4) {
    std::vector<float> buf(bytes / 4, 1.0f), copy(bytes / 4);
    const int iters = std::max(5, static_cast<int>((size_t{256} << 20) / bytes));
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
    const double busbw = static_cast<double>(bytes) / t * axonn::bus_factor(axonn::CollectiveKind::all_reduce, n) / 1e9;
    const double memcpy_bw = static_cast<double>(bytes) / tc / 1e9;
    if (topo.rank == 0)
      std::printf("%12zu %8d %12.1f %12.3f %14.3f %7.3fx\n", bytes, iters, t * 1e6, busbw, memcpy_bw, busbw / memcpy_bw);
  }
  return 0;
}

std::string self_path() {
  char path[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return std::string(path, static_cast<size_t>(std::max<ssize_t>(n, 0)));
}

}  // namespace

int main(int argc, char** argv) {
  if (axonn::pmix_server_in_environment()) return worker(argc > 1 ? argv[1] : "allreduce");
  const std::string self = self_path();
  const std::string launcher = self.substr(0, self.rfind('/')) + "/../bin/axonn run";
  std::printf("PMIx bootstrap: local launcher start -> every rank connected (4D grid) -> exit\n");
  std::printf("%6s %12s %10s\n", "ranks", "median s", "vs 1 s goal");
  for (int ranks : {4, 8}) {
    std::vector<double> times;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = clock_type::now();
      const int rc = std::system((launcher + " -n " + std::to_string(ranks) + " -- " + self_path() + " bootstrap").c_str());
      times.push_back(seconds_since(t0));
      if (rc != 0) {
        std::fprintf(stderr, "bootstrap job of %d ranks failed\n", ranks);
        return 1;
      }
    }
    std::sort(times.begin(), times.end());
    std::printf("%6d %12.3f %9.2fx\n", ranks, times[2], times[2] / 1.0);
  }
  std::printf("\nGloo all-reduce, 4 ranks on loopback (float32, ring):\n");
  std::fflush(stdout);
  return std::system((launcher + " -n 4 -- " + self + " allreduce").c_str()) == 0 ? 0 : 1;
}
