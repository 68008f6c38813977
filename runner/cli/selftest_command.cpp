// axonn selftest [--backend gloo|nccl] [--layout DxXxYxZ[eN][:order]] [--timeout-ms N] [--kill-rank R] [--stall-rank R]
// Run under `axonn run -n N` or `srun --mpi=pmix`: reads the topology from PMIx, builds
// the communicators of the layout (AXONN_LAYOUT, else --layout, else pure data parallel),
// runs every collective (all-to-all included) on every axis with values whose results are
// exact, and prints per rank what it checked. Rank 0 closes with "selftest: N passed, M failed" over all
// ranks; the exit code is non-zero on any failure anywhere. --backend nccl runs the same
// checks on device buffers (one GPU per rank, by local rank), copied to and from the host.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "runner/cli/args.hpp"
#include "runner/cli/commands.hpp"
#include "runner/cli/environment.hpp"
#include "runner/cli/report_error.hpp"
#include "comm/bfloat16.hpp"
#include "comm/comm_grid.hpp"
#include "comm/cuda_device.hpp"
#include "core/exit_codes.hpp"
#include "runner/pmix/topology.hpp"

namespace axonn {
namespace {

// Where one check's buffers live: the host vectors themselves (Gloo), or device copies
// (NCCL) made by at() and copied back into the host vectors by finish().
class Staging {
 public:
  explicit Staging(bool on_device) : on_device_(on_device) {}

  template <typename T>
  void* at(std::vector<T>& host) {
    if (!on_device_) return host.data();
    const size_t bytes = host.size() * sizeof(T);
    copies_.push_back({std::make_unique<DeviceBytes>(bytes), host.data(), bytes});
    copies_.back().device->upload(host.data(), bytes);
    return copies_.back().device->data();
  }
  // Waits for the collectives issued on `c`, then brings the results back to the host.
  void finish(Communicator& c) {
    c.synchronize();
    for (auto& copy : copies_) copy.device->download(copy.host, copy.bytes);
    copies_.clear();
  }

 private:
  struct Copy {
    std::unique_ptr<DeviceBytes> device;
    void* host;
    size_t bytes;
  };
  bool on_device_;
  std::vector<Copy> copies_;
};

// Runs the collectives on one communicator; returns the number of failed checks.
int check_axis(Communicator& c, int me, bool on_device) {
  const auto& M = c.members();
  const int n = c.size(), g = c.rank();
  int failed = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      ++failed;
      std::printf("selftest: FAILED %s on %s group (world ranks", what, c.name().c_str());
      for (int m : M) std::printf(" %d", m);
      std::printf(")\n");
    }
  };

  std::vector<float> ar(1000);
  for (size_t i = 0; i < ar.size(); ++i) ar[i] = static_cast<float>((me + 1) * static_cast<int>(i + 1));
  Staging stage(on_device);
  c.all_reduce(stage.at(ar), ar.size(), ElementType::float32);
  stage.finish(c);
  bool ok = true;
  int members_sum = 0;
  for (int m : M) members_sum += m + 1;
  for (size_t i = 0; i < ar.size(); ++i) ok &= ar[i] == static_cast<float>(members_sum * static_cast<int>(i + 1));
  expect(ok, "all_reduce float32");

  std::vector<float> mine(3), all(static_cast<size_t>(3 * n), -1.0f);
  for (int i = 0; i < 3; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(me * 10 + i);
  c.all_gather(stage.at(mine), stage.at(all), 3, ElementType::float32);
  stage.finish(c);
  ok = true;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 3; ++i)
      ok &= all[static_cast<size_t>(r * 3 + i)] == static_cast<float>(M[static_cast<size_t>(r)] * 10 + i);
  expect(ok, "all_gather");

  std::vector<float> in(static_cast<size_t>(5 * n)), out(5, -1.0f);
  for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>(me * 100 + static_cast<int>(j));
  c.reduce_scatter(stage.at(in), stage.at(out), 5, ElementType::float32);
  stage.finish(c);
  ok = true;
  for (int i = 0; i < 5; ++i) {
    int want = 0;
    for (int m : M) want += m * 100 + g * 5 + i;
    ok &= out[static_cast<size_t>(i)] == static_cast<float>(want);
  }
  expect(ok, "reduce_scatter");

  std::vector<float> b(1, static_cast<float>(me));
  c.broadcast(stage.at(b), 1, n - 1, ElementType::float32);
  stage.finish(c);
  expect(b[0] == static_cast<float>(M.back()), "broadcast");

  std::vector<uint16_t> bf(64, float_to_bf16(static_cast<float>(me + 1)));
  c.all_reduce(stage.at(bf), bf.size(), ElementType::bfloat16);
  stage.finish(c);
  ok = true;
  for (uint16_t v : bf) ok &= bf16_to_float(v) == static_cast<float>(members_sum);
  expect(ok, "all_reduce bfloat16");

  // all_to_all: element i of the block world rank m sends group rank t is m*100 + t*10 + i.
  std::vector<float> blocks(static_cast<size_t>(2 * n)), swapped(blocks.size(), -1.0f);
  for (size_t j = 0; j < blocks.size(); ++j)
    blocks[j] = static_cast<float>(me * 100 + static_cast<int>(j / 2) * 10 + static_cast<int>(j % 2));
  c.all_to_all(stage.at(blocks), stage.at(swapped), 2, ElementType::float32);
  stage.finish(c);
  ok = true;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < 2; ++i)
      ok &= swapped[static_cast<size_t>(2 * j + i)] == static_cast<float>(M[static_cast<size_t>(j)] * 100 + g * 10 + i);
  expect(ok, "all_to_all");

  // all_to_allv, bfloat16: j + 1 elements to group rank j, so blocks differ in size (values
  // below 256, exact in bfloat16).
  std::vector<size_t> send_counts, recv_counts(static_cast<size_t>(n), static_cast<size_t>(g + 1));
  std::vector<uint16_t> uneven, received(static_cast<size_t>(n * (g + 1)), 0);
  for (int j = 0; j < n; ++j) {
    send_counts.push_back(static_cast<size_t>(j + 1));
    for (int i = 0; i <= j; ++i) uneven.push_back(float_to_bf16(static_cast<float>((g * 16 + j * 4 + i) % 256)));
  }
  c.all_to_allv(stage.at(uneven), send_counts, stage.at(received), recv_counts, ElementType::bfloat16);
  stage.finish(c);
  ok = true;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i <= g; ++i)
      ok &= bf16_to_float(received[static_cast<size_t>(j * (g + 1) + i)]) ==
            static_cast<float>((j * 16 + g * 4 + i) % 256);
  expect(ok, "all_to_allv bfloat16");

  c.barrier();
  return failed;
}

}  // namespace

int command_selftest(const CommandArgs& argv) {
  const std::vector<OptionSpec> specs = {
      {"backend", true, "gloo (host buffers, default) or nccl (device buffers, one GPU per rank)"},
      {"layout", true, "DxXxYxZ[eN][:order]; default AXONN_LAYOUT, else <world>x1x1x1"},
      {"timeout-ms", true, "collective timeout (default 30000)"},
      {"kill-rank", true, "this rank kills itself with SIGKILL after connecting (tests failure handling)"},
      {"stall-rank", true, "this rank sleeps instead of joining the collectives (tests timeouts)"},
      {"help", false, "this help"},
  };
  const std::optional<Args> parsed =
      parse_or_usage(argv, specs, "axonn selftest [options]   (under axonn run or srun --mpi=pmix)");
  if (!parsed) return exit_code::ok;
  const Args& args = *parsed;
  PmixClient client;
  const Topology topo = topology_from_pmix(client);
  std::string layout_text = std::to_string(topo.world) + "x1x1x1";
  if (const std::optional<std::string> env = environment("AXONN_LAYOUT"))
    layout_text = *env;
  else if (auto v = args.value("layout"))
    layout_text = *v;
  const Layout layout = parse_layout(layout_text);
  const auto timeout = std::chrono::milliseconds(args.integer("timeout-ms", 100, 3'600'000).value_or(30000));
  const std::string backend_text = args.value("backend").value_or("gloo");
  if (backend_text != "gloo" && backend_text != "nccl")
    throw UsageError("--backend " + backend_text + ": expected gloo or nccl");
  const CommBackend backend = parse_comm_backend(backend_text);
  const bool on_device = backend == CommBackend::nccl;
  if (on_device) {
    set_cuda_check_rank(topo.rank);
    select_cuda_device(topo.local_rank, topo.local_size);
  }
  CommGrid grid(client, layout, timeout, /*single_host=*/topo.nodes == 1 || std::getenv("AXONN_LAUNCHER"), backend);
  std::printf("selftest: %s layout %s coords x=%d y=%d z=%d data=%d backend %s\n", describe(topo).c_str(),
              format_layout_with_order(layout).c_str(), grid.coords().x, grid.coords().y, grid.coords().z,
              grid.coords().data, comm_backend_name(backend));
  std::fflush(stdout);
  if (auto victim = args.integer("kill-rank", 0, topo.world - 1); victim && *victim == topo.rank) raise(SIGKILL);
  if (auto sleeper = args.integer("stall-rank", 0, topo.world - 1); sleeper && *sleeper == topo.rank) pause();

  int checks = 0, failed = 0;
  std::vector<float> totals;
  try {
    for (int a = 0; a < kCommAxisCount; ++a) {
      Communicator& c = grid.axis(static_cast<CommAxis>(a));
      failed += check_axis(c, topo.rank, on_device);
      checks += 7;
    }
    // Failures summed over ranks before the exit code is chosen (nccl-tests).
    totals = {static_cast<float>(checks), static_cast<float>(failed)};
    Staging stage(on_device);
    grid.world().all_reduce(stage.at(totals), 2, ElementType::float32);
    stage.finish(grid.world());
  } catch (const CommError& e) {
    // Said here, while the grid is still up, as main would (report_error): tearing it down closes this
    // rank's connections, and a peer still waiting on it would fail at once on the closed
    // socket and be reported first (the launcher stops the job at the first failure),
    // naming this rank rather than the one that stalled.
    return report_error("selftest", e);
  }
  const int all_failed = static_cast<int>(totals[1]);
  if (topo.rank == 0)
    std::printf("selftest: %d passed, %d failed\n", static_cast<int>(totals[0]) - all_failed, all_failed);
  return all_failed == 0 ? exit_code::ok : exit_code::failure;
}

}  // namespace axonn
