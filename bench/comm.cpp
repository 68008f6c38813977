// Gloo collectives on loopback and PMIx bootstrap time.
//   build/bench/bench_comm   (driver: starts itself under `build/bin/axonn run`, as users do)
// 1. Bootstrap: wall time of a local job of 4 and 8 ranks that initialize PMIx, read their
//    topology, connect every group of a 4D layout and exit; goal < 1 s at 8 ranks. Jobs
//    with the second set of pairs, in sync mode (the default), alternate with jobs without
//    (AXONN_GLOO_SMALL_BYTES=0), so both medians see the same machine load.
// 2. All-reduce of 2 and of 4 ranks over message sizes: Gloo's own ring alone (what every
//    size used before the sync pairs) against the default communicator (one message up to
//    64 KiB, a ring of 16 KiB pieces on the sync pairs above, up to 64 dependent exchanges,
//    Gloo's own ring beyond: gloo_sync.hpp), in one job, in alternating rounds; medians of
//    the rounds, and the 99th percentile of single calls. Printed with the speedup, bus
//    bandwidth (nccl-tests' definition: busbw =
//    size/time * 2(n-1)/n) and a single-process memcpy of the same size measured in the same
//    job (the ceiling every loopback byte pays at least once). Beside it, the all-to-all of
//    the same bytes (each rank's whole send buffer, nccl-tests' size; busbw factor (n-1)/n)
//    on the default communicator, alternating with its all-reduce: its time and bus bandwidth
//    and its time over the all-reduce's.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "comm/comm_grid.hpp"
#include "comm/gloo_communicator.hpp"
#include "comm/gloo_mesh.hpp"
#include "runner/pmix/topology.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

using axonn::bench::median;
using axonn::bench::seconds_since;
using axonn::bench::quantile;

constexpr int kRounds = 5;

// Seconds per call of two alternating calls: the median over rounds of each round's mean,
// and the 99th percentile of the single calls (a slow call in a hundred is what a training
// step of many collectives waits for).
struct Alternated {
  double call_s, other_s;
  double call_p99_s, other_p99_s;
};

// `iters` calls of `call` in each of kRounds rounds alternating with `other` (likewise).
template <typename A, typename B>
Alternated alternate(int iters, A&& call, B&& other) {
  std::vector<double> a, b, each_a, each_b;
  const auto round_of = [&](auto&& f, std::vector<double>& means, std::vector<double>& each) {
    double total = 0;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = clock_type::now();
      f();
      each.push_back(seconds_since(t0));
      total += each.back();
    }
    means.push_back(total / iters);
  };
  for (int round = 0; round < kRounds; ++round) {
    round_of(call, a, each_a);
    round_of(other, b, each_b);
  }
  return {median(a), median(b), quantile(each_a, 0.99), quantile(each_b, 0.99)};
}

int allreduce_worker() {
  axonn::PmixClient client;
  const axonn::Topology topo = axonn::topology_from_pmix(client);
  const auto timeout = std::chrono::milliseconds(60000);
  std::vector<int> all;
  for (int r = 0; r < topo.world; ++r) all.push_back(r);
  // Two communicators over the same ranks: one on the ring alone, one as CommGrid builds
  // them (its own ring pairs plus the sync pairs of the latency path).
  const auto contexts =
      axonn::connect_gloo_groups(client, axonn::make_gloo_device(true),
                                 {{"ring", all}, {"default", all}, {"default+sync", all}}, timeout, "bench");
  axonn::GlooCommunicator ring({"ring", all}, contexts[0], timeout, nullptr);
  axonn::GlooCommunicator fast({"default", all}, contexts[1], timeout, nullptr, contexts[2]);

  const int n = topo.world;
  const double factor = axonn::bus_factor(axonn::CollectiveKind::all_reduce, n);
  if (topo.rank == 0) {
    std::printf("Gloo all-reduce, %d ranks on loopback (float32): ring alone vs default (latency path <= %zu B);\n", n,
                axonn::gloo_small_message_bytes());
    std::printf("medians of %d alternating rounds\n", kRounds);
    std::printf("%10s %6s %11s %11s %8s %11s %11s %11s %11s %9s %11s %11s %8s\n", "size (B)", "iters", "ring us",
                "default us", "speedup", "ring p99", "default p99", "busbw GB/s", "memcpy GB/s", "vs memcpy", "a2a us",
                "a2a busbw", "a2a/ar");
  }
  for (size_t bytes = 64; bytes <= (size_t{64} << 20); bytes *= 4) {
    std::vector<float> buf(bytes / 4, 1.0f), copy(bytes / 4), received(bytes / 4);
    const size_t block = bytes / 4 / static_cast<size_t>(n);  // all-to-all elements per peer
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes / kRounds, 1, 200));
    ring.all_reduce(buf.data(), buf.size(), axonn::ElementType::float32);  // warm-up (and sync-mode switch)
    fast.all_reduce(buf.data(), buf.size(), axonn::ElementType::float32);
    fast.barrier();
    const Alternated reduce = alternate(
        iters, [&] { ring.all_reduce(buf.data(), buf.size(), axonn::ElementType::float32); },
        [&] { fast.all_reduce(buf.data(), buf.size(), axonn::ElementType::float32); });
    const double t_ring = reduce.call_s, t_fast = reduce.other_s;
    const auto c0 = clock_type::now();
    for (int i = 0; i < iters * kRounds; ++i) {
      std::memcpy(copy.data(), buf.data(), bytes);
      asm volatile("" : : "r"(copy.data()) : "memory");
    }
    const double t_copy = seconds_since(c0) / (iters * kRounds);
    fast.all_to_all(buf.data(), received.data(), block, axonn::ElementType::float32);  // warm-up
    const Alternated a2a = alternate(
        iters, [&] { fast.all_to_all(buf.data(), received.data(), block, axonn::ElementType::float32); },
        [&] { fast.all_reduce(buf.data(), buf.size(), axonn::ElementType::float32); });
    const double t_a2a = a2a.call_s, t_reduce = a2a.other_s;
    const double a2a_bytes = static_cast<double>(block * static_cast<size_t>(n) * sizeof(float));
    const double a2a_busbw = a2a_bytes / t_a2a * axonn::bus_factor(axonn::CollectiveKind::all_to_all, n) / 1e9;
    const double busbw = static_cast<double>(bytes) / t_fast * factor / 1e9;
    const double memcpy_bw = static_cast<double>(bytes) / t_copy / 1e9;
    if (topo.rank == 0)
      std::printf("%10zu %6d %11.1f %11.1f %7.2fx %11.1f %11.1f %11.3f %11.3f %8.3fx %11.1f %11.3f %7.2fx\n", bytes,
                  iters * kRounds, t_ring * 1e6, t_fast * 1e6, t_ring / t_fast, reduce.call_p99_s * 1e6,
                  reduce.other_p99_s * 1e6, busbw, memcpy_bw, busbw / memcpy_bw, t_a2a * 1e6, a2a_busbw,
                  t_a2a / t_reduce);
  }
  return 0;
}

int bootstrap_worker() {
  axonn::PmixClient client;
  const axonn::Topology topo = axonn::topology_from_pmix(client);
  const axonn::Layout layout = axonn::parse_layout(topo.world == 8 ? "2x2x1x2" : "1x2x2x1");
  axonn::CommGrid grid(client, layout, std::chrono::milliseconds(60000), true);
  return 0;
}

std::string self_path() {
  char path[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return std::string(path, static_cast<size_t>(std::max<ssize_t>(n, 0)));
}

const std::vector<axonn::OptionSpec> kOptions = {{"help", false, "this help"}};

// The worker the driver starts itself as under the launcher: "bootstrap" or "allreduce"
// (the default); the driver itself is run without one.
std::string read_worker(const axonn::Args& args) {
  const std::vector<std::string>& words = args.positionals();
  if (words.size() > 1 || (words.size() == 1 && words[0] != "bootstrap" && words[0] != "allreduce"))
    throw axonn::UsageError("unexpected argument '" + words.back() + "'");
  return words.empty() ? "allreduce" : words[0];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string worker = axonn::bench::parse_bench_args(
      argc, argv, kOptions, "bench_comm   (starts itself under axonn run, as users do)", read_worker);
  if (axonn::pmix_server_in_environment()) return worker == "bootstrap" ? bootstrap_worker() : allreduce_worker();
  const std::string self = self_path();
  const std::string launcher = self.substr(0, self.rfind('/')) + "/../bin/axonn run";
  std::printf("PMIx bootstrap: local launcher start -> every rank connected (4D grid) -> exit; medians of 5\n");
  std::printf("%6s %18s %18s %12s\n", "ranks", "ring pairs only s", "default s", "vs 1 s goal");
  for (int ranks : {4, 8}) {
    std::vector<double> ring_only, with_sync;
    for (int rep = 0; rep < 5; ++rep) {
      for (const bool sync_pairs : {false, true}) {
        const std::string env = sync_pairs ? "" : "AXONN_GLOO_SMALL_BYTES=0 ";
        const auto t0 = clock_type::now();
        const int rc =
            std::system((env + launcher + " -n " + std::to_string(ranks) + " -- " + self + " bootstrap").c_str());
        (sync_pairs ? with_sync : ring_only).push_back(seconds_since(t0));
        if (rc != 0) {
          std::fprintf(stderr, "bootstrap job of %d ranks failed\n", ranks);
          return 1;
        }
      }
    }
    std::printf("%6d %18.3f %18.3f %11.2fx\n", ranks, median(ring_only), median(with_sync), median(with_sync) / 1.0);
  }
  std::printf("\n");
  std::fflush(stdout);
  for (int ranks : {2, 4}) {
    if (std::system((launcher + " -n " + std::to_string(ranks) + " -- " + self + " allreduce").c_str()) != 0) return 1;
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
