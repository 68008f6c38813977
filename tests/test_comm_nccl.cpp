// NCCL communicators on device buffers (label gpu). Every test needs a GPU and, without
// one, skips saying why ("no CUDA device: ..."). NCCL puts each rank of a communicator on
// its own GPU, so the tests with two ranks need two GPUs and say so when there is one.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "comm/bfloat16.hpp"
#include "comm/comm_grid.hpp"
#include "comm/cuda_device.hpp"
#include "cuda_skip.hpp"
#include "process_helpers.hpp"
#include "thread_exchange.hpp"
#if AXONN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "comm/cuda_check.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/nccl_groups.hpp"
#endif

namespace axonn {
namespace {

using test::contains;
using test::kAxonn;
using test::run_command;
using test::run_ranks;

int device_count() { return cuda_device_count(); }

constexpr auto kTimeout = std::chrono::milliseconds(20000);

// Host vector <-> device buffer for the checks.
template <typename T>
std::unique_ptr<DeviceBytes> to_device(const std::vector<T>& host) {
  auto d = std::make_unique<DeviceBytes>(host.size() * sizeof(T));
  d->upload(host.data(), host.size() * sizeof(T));
  return d;
}
template <typename T>
std::vector<T> to_host(const DeviceBytes& d, size_t count) {
  std::vector<T> host(count);
  d.download(host.data(), count * sizeof(T));
  return host;
}

// One rank's exact checks of every collective on `c` (a group of size n, this rank's world
// rank `me`), as the selftest does them, on device buffers.
void check_collectives(Communicator& c, int me) {
  const auto& M = c.members();
  const int n = c.size(), g = c.rank();
  int members_sum = 0;
  for (int m : M) members_sum += m + 1;

  std::vector<float> ar(1000);
  for (size_t i = 0; i < ar.size(); ++i) ar[i] = static_cast<float>((me + 1) * static_cast<int>(i + 1));
  auto d_ar = to_device(ar);
  c.all_reduce(d_ar->data(), ar.size(), ElementType::float32);

  std::vector<float> mine(3);
  for (int i = 0; i < 3; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(me * 10 + i);
  auto d_mine = to_device(mine);
  auto d_all = to_device(std::vector<float>(static_cast<size_t>(3 * n), -1.0f));
  c.all_gather(d_mine->data(), d_all->data(), 3, ElementType::float32);

  std::vector<float> in(static_cast<size_t>(5 * n));
  for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>(me * 100 + static_cast<int>(j));
  auto d_in = to_device(in);
  auto d_out = to_device(std::vector<float>(5, -1.0f));
  c.reduce_scatter(d_in->data(), d_out->data(), 5, ElementType::float32);

  auto d_b = to_device(std::vector<float>(7, static_cast<float>(me)));
  c.broadcast(d_b->data(), 7, n - 1, ElementType::float32);

  auto d_bf = to_device(std::vector<uint16_t>(64, float_to_bf16(static_cast<float>(me + 1))));
  c.all_reduce(d_bf->data(), 64, ElementType::bfloat16);

  // all-to-all: element i of the block world rank m sends group rank t is m*100 + t*10 + i.
  std::vector<float> blocks(static_cast<size_t>(2 * n));
  for (size_t j = 0; j < blocks.size(); ++j)
    blocks[j] = static_cast<float>(me * 100 + static_cast<int>(j / 2) * 10 + static_cast<int>(j % 2));
  auto d_blocks = to_device(blocks);
  auto d_swapped = to_device(std::vector<float>(blocks.size(), -1.0f));
  c.all_to_all(d_blocks->data(), d_swapped->data(), 2, ElementType::float32);
  // all_to_allv: one element to the group ranks of the other parity than this one's plus one
  // (on one rank: to itself), none to the others.
  std::vector<size_t> one_or_none;
  for (int j = 0; j < n; ++j) one_or_none.push_back(static_cast<size_t>((g + j + 1) % 2));
  std::vector<float> ones_in, ones_want;
  for (int j = 0; j < n; ++j)
    if (one_or_none[static_cast<size_t>(j)]) {
      ones_in.push_back(static_cast<float>(me * 100 + j * 10));
      ones_want.push_back(static_cast<float>(M[static_cast<size_t>(j)] * 100 + g * 10));
    }
  auto d_ones_in = to_device(ones_in);
  auto d_ones_out = to_device(std::vector<float>(ones_want.size(), -1.0f));
  c.all_to_allv(d_ones_in->data(), one_or_none, d_ones_out->data(), one_or_none, ElementType::float32);
  c.barrier();
  c.synchronize();

  const auto r_ar = to_host<float>(*d_ar, ar.size());
  for (size_t i = 0; i < ar.size(); ++i) ASSERT_EQ(r_ar[i], static_cast<float>(members_sum * static_cast<int>(i + 1)));
  const auto r_all = to_host<float>(*d_all, static_cast<size_t>(3 * n));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(r_all[static_cast<size_t>(r * 3 + i)], static_cast<float>(M[static_cast<size_t>(r)] * 10 + i));
  const auto r_out = to_host<float>(*d_out, 5);
  for (int i = 0; i < 5; ++i) {
    int want = 0;
    for (int m : M) want += m * 100 + g * 5 + i;
    ASSERT_EQ(r_out[static_cast<size_t>(i)], static_cast<float>(want));
  }
  for (float v : to_host<float>(*d_b, 7)) ASSERT_EQ(v, static_cast<float>(M.back()));
  for (uint16_t v : to_host<uint16_t>(*d_bf, 64)) ASSERT_EQ(bf16_to_float(v), static_cast<float>(members_sum));
  const auto r_swapped = to_host<float>(*d_swapped, blocks.size());
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < 2; ++i)
      ASSERT_EQ(r_swapped[static_cast<size_t>(2 * j + i)],
                static_cast<float>(M[static_cast<size_t>(j)] * 100 + g * 10 + i));
  ASSERT_EQ(to_host<float>(*d_ones_out, ones_want.size()), ones_want);
}

TEST(NcclGrid, SingleRankEveryCollectiveOnEveryAxisCountsNothing) {
  REQUIRE_CUDA_DEVICES(1);
  run_ranks(1, [&](int rank, Exchange& exchange) {
    select_cuda_device(0, 1);  // current device is per thread
    CommGrid grid(exchange, parse_layout("1x1x1x1"), kTimeout, true, CommBackend::nccl);
    for (int a = 0; a < kCommAxisCount; ++a) {
      Communicator& c = grid.axis(static_cast<CommAxis>(a));
      ASSERT_EQ(c.size(), 1);
      check_collectives(c, rank);
    }
    grid.synchronize();
    // Groups of one move no bytes: the layout model omits them, so the counters must too.
    for (const auto& axis : grid.counters())
      for (const auto& kind : axis) EXPECT_EQ(kind.calls, 0);
  });
}

TEST(NcclSelftest, TwoRanksNeedTwoGpusAndSaySoOnOne) {
  REQUIRE_CUDA_DEVICES(1);
  const auto r = run_command(kAxonn + " run -n 2 selftest --backend nccl --layout 1x2x1x1");
  if (device_count() >= 2) {
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "[0] selftest: 98 passed, 0 failed")) << r.output;
  } else {
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "2 ranks on this node but only 1 CUDA device(s)")) << r.output;
  }
}

TEST(NcclSelftest, StalledRankTimesOutNamingAxisCollectiveAndRanks) {
  REQUIRE_CUDA_DEVICES(2);
  const auto r = run_command(kAxonn +
                             " run -n 2 --grace-ms 500 selftest --backend nccl --layout 1x2x1x1 --stall-rank 1 "
                             "--timeout-ms 1500");
  EXPECT_NE(r.code, 0) << r.output;
  // NCCL may still be connecting the pair when the limit passes (not queued) or wait
  // inside the kernel (not finished); either way the message names group, collective, ranks.
  EXPECT_TRUE(
      contains(r.output, "all_reduce on group 'x' (world ranks 0,1, 4000 bytes) did not finish within 1500 ms") ||
      contains(r.output, "all_reduce on group 'x' (world ranks 0,1, 4000 bytes) was not queued within 1500 ms"))
      << r.output;
  // Rank 1 sleeps until stopped: the launcher ended the job, not run_command's time limit (124).
  EXPECT_NE(r.code, 124) << r.output;
}

#if AXONN_HAVE_CUDA

// A one-rank NCCL communicator (a real one, where the grid would use a device copy), so
// every collective goes through NCCL on a single GPU.
struct SoloComm {
  std::vector<CollectiveRecord> records;
  std::unique_ptr<NcclCommunicator> comm;

  SoloComm(Exchange& exchange, std::chrono::milliseconds timeout) {
    const GroupSpec group{"solo", {0}};
    const auto comms = connect_nccl_groups(exchange, {group}, timeout, "solo");
    comm = std::make_unique<NcclCommunicator>(
        group, 0, comms[0], timeout, [this](const CollectiveRecord& r) { records.push_back(r); }, nullptr);
  }
};

TEST(NcclCommunicator, OneRankRunsEveryCollectiveThroughNcclAndRecordsNcclTestsSizes) {
  REQUIRE_CUDA_DEVICES(1);
  run_ranks(1, [&](int rank, Exchange& exchange) {
    select_cuda_device(0, 1);  // current device is per thread
    SoloComm solo(exchange, kTimeout);
    check_collectives(*solo.comm, rank);
    ASSERT_EQ(solo.records.size(), 8u);
    const CollectiveKind kinds[] = {CollectiveKind::all_reduce,     CollectiveKind::all_gather,
                                    CollectiveKind::reduce_scatter, CollectiveKind::broadcast,
                                    CollectiveKind::all_reduce,     CollectiveKind::all_to_all,
                                    CollectiveKind::all_to_all,     CollectiveKind::barrier};
    // Buffer, gathered output, scattered input, buffer, buffer, the bytes sent (to itself).
    const size_t bytes[] = {4000, 12, 20, 28, 128, 8, 4, 0};
    for (size_t i = 0; i < solo.records.size(); ++i) {
      EXPECT_EQ(solo.records[i].kind, kinds[i]) << i;
      EXPECT_EQ(solo.records[i].bytes, bytes[i]) << i;
      EXPECT_GE(solo.records[i].duration.count(), 0) << i;
    }
    EXPECT_EQ(solo.comm->unfinished(), 0u);
  });
}

// Host functions on a stream (cudaLaunchHostFunc) stand in for compute here; the emulator has none.
#ifndef AXONN_CUDA_EMULATOR
// Blocks a stream in a host function until released (or its hold time passed), standing in for
// compute that has not finished.
struct StreamGate {
  std::atomic<bool> open{false};
  std::chrono::milliseconds hold;
  explicit StreamGate(std::chrono::milliseconds h) : hold(h) {}
  static void wait(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto until = std::chrono::steady_clock::now() + gate->hold;
    while (!gate->open && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

TEST(NcclCommunicator, WaitForAndMakeWaitOrderCollectivesBetweenComputeKernels) {
  REQUIRE_CUDA_DEVICES(1);
  run_ranks(1, [&](int, Exchange& exchange) {
    select_cuda_device(0, 1);
    SoloComm solo(exchange, kTimeout);
    NcclCommunicator& c = *solo.comm;
    cudaStream_t compute = nullptr;
    AXONN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    const size_t count = 1 << 20;
    DeviceBytes in(count * 4), out(count * 4);
    in.fill_bytes(0);
    out.fill_bytes(0);
    // "Compute" writes the input late; the all-gather (a copy on one rank) must read it after,
    // and the read-back on the compute stream must see the all-gather's output.
    StreamGate gate(std::chrono::milliseconds(200));
    AXONN_CUDA_CHECK(cudaLaunchHostFunc(compute, &StreamGate::wait, &gate));
    AXONN_CUDA_CHECK(cudaMemsetAsync(in.data(), 0x3f, count * 4, compute));
    c.wait_for(compute);
    c.all_gather(in.data(), out.data(), count, ElementType::float32);
    c.make_wait(compute);
    std::vector<uint32_t> host(count, 0);
    AXONN_CUDA_CHECK(cudaMemcpyAsync(host.data(), out.data(), count * 4, cudaMemcpyDeviceToHost, compute));
    AXONN_CUDA_CHECK(cudaStreamSynchronize(compute));
    for (size_t i = 0; i < count; i += 4099) ASSERT_EQ(host[i], 0x3f3f3f3fu) << i;
    ASSERT_EQ(host.back(), 0x3f3f3f3fu);
    c.synchronize();
    AXONN_CUDA_CHECK(cudaStreamDestroy(compute));
  });
}

// A one-rank NCCL grid ordered against a compute stream: compute writes `in` late (behind a
// 200 ms gate), pass_on(grid, in, out, count) moves it to `out` with collectives, and a
// read-back queued on compute afterwards must see it there.
void expect_compute_sees_what_collectives_passed_on(
    const std::function<void(CommGrid&, void* in, void* out, size_t count)>& pass_on) {
  run_ranks(1, [&](int, Exchange& exchange) {
    select_cuda_device(0, 1);
    CommGrid grid(exchange, parse_layout("1x1x1x1"), kTimeout, true, CommBackend::nccl);
    cudaStream_t compute = nullptr;
    AXONN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    grid.order_with_compute(compute);
    const size_t count = 1 << 20;
    DeviceBytes in(count * 4), out(count * 4);
    in.fill_bytes(0);
    out.fill_bytes(0);
    StreamGate gate(std::chrono::milliseconds(200));
    AXONN_CUDA_CHECK(cudaLaunchHostFunc(compute, &StreamGate::wait, &gate));
    AXONN_CUDA_CHECK(cudaMemsetAsync(in.data(), 0x3f, count * 4, compute));
    pass_on(grid, in.data(), out.data(), count);
    std::vector<uint32_t> host(count, 0);
    AXONN_CUDA_CHECK(cudaMemcpyAsync(host.data(), out.data(), count * 4, cudaMemcpyDeviceToHost, compute));
    AXONN_CUDA_CHECK(cudaStreamSynchronize(compute));
    for (size_t i = 0; i < count; i += 4099) ASSERT_EQ(host[i], 0x3f3f3f3fu) << i;
    ASSERT_EQ(host.back(), 0x3f3f3f3fu);
    grid.synchronize();
    grid.order_with_compute(nullptr);
    AXONN_CUDA_CHECK(cudaStreamDestroy(compute));
  });
}

// The trainer's mode: the grid orders every collective against the backend's compute
// stream by itself (CommGrid::order_with_compute), so code written for blocking Gloo calls,
// "kernel; collective; kernel", runs in that order with no wait_for/make_wait of its own.
// Two collectives on two axes (copies on one rank, each on its own communicator's stream).
TEST(NcclGrid, OrderWithComputePutsEveryCollectiveBetweenTheKernelsAroundIt) {
  REQUIRE_CUDA_DEVICES(1);
  expect_compute_sees_what_collectives_passed_on([](CommGrid& grid, void* in, void* out, size_t count) {
    DeviceBytes mid(count * 4);
    mid.fill_bytes(0);
    grid.axis(CommAxis::z).all_gather(in, mid.data(), count, ElementType::float32);
    grid.axis(CommAxis::y).reduce_scatter(mid.data(), out, count, ElementType::float32);
    grid.synchronize();  // before mid goes
  });
}

// Overlap: a started collective waits for the compute queued before it, and compute waits
// for it only from finish(ticket) on.
TEST(NcclGrid, StartedCollectiveIsSeenByComputeAfterFinish) {
  REQUIRE_CUDA_DEVICES(1);
  expect_compute_sees_what_collectives_passed_on([](CommGrid& grid, void* in, void* out, size_t count) {
    Communicator& z = grid.axis(CommAxis::z);
    const Communicator::Ticket first = z.start_all_gather(in, out, count, ElementType::float32);
    const Communicator::Ticket second = z.start_all_reduce(out, count, ElementType::float32);
    // In place (rank 0's block starts at the buffer), as NCCL allows.
    const Communicator::Ticket third = z.start_reduce_scatter(out, out, count, ElementType::float32);
    EXPECT_GT(second, first);
    EXPECT_GT(third, second);
    z.finish(third);
  });
}

TEST(NcclCommunicator, CollectiveBehindWorkThatNeverEndsTimesOutAndAborts) {
  REQUIRE_CUDA_DEVICES(1);
  run_ranks(1, [&](int, Exchange& exchange) {
    select_cuda_device(0, 1);
    SoloComm solo(exchange, std::chrono::milliseconds(300));
    NcclCommunicator& c = *solo.comm;
    cudaStream_t compute = nullptr;
    AXONN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    DeviceBytes buf(4000);
    // The gate opens by itself after 3 s: ncclCommAbort may wait for NCCL's own streams,
    // which can depend on the blocked one; then the abort returns once the gate opens.
    StreamGate gate(std::chrono::milliseconds(3000));
    AXONN_CUDA_CHECK(cudaLaunchHostFunc(compute, &StreamGate::wait, &gate));
    c.wait_for(compute);
    c.all_reduce(buf.data(), 1000, ElementType::float32);
    try {
      c.synchronize();
      ADD_FAILURE() << "synchronize returned although the collective could not start";
    } catch (const CommError& e) {
      EXPECT_TRUE(
          contains(e.what(), "all_reduce on group 'solo' (world ranks 0, 4000 bytes) did not start within 300 ms"))
          << e.what();
      EXPECT_TRUE(contains(e.what(), "the communicator was aborted")) << e.what();
    }
    EXPECT_TRUE(c.aborted());
    try {
      c.all_reduce(buf.data(), 1000, ElementType::float32);
      ADD_FAILURE() << "an aborted communicator accepted a collective";
    } catch (const CommError& e) {
      EXPECT_TRUE(contains(e.what(), "was aborted earlier")) << e.what();
    }
    gate.open = true;
    (void)cudaStreamSynchronize(compute);
    (void)cudaStreamDestroy(compute);
  });
}

#endif  // AXONN_CUDA_EMULATOR

TEST(NcclCommunicator, TwoRanksOnTwoGpusStalledPeerTimesOutNamingGroupAndRanks) {
  REQUIRE_CUDA_DEVICES(2);
  std::atomic<bool> rank0_done{false};
  run_ranks(2, [&](int rank, Exchange& exchange) {
    AXONN_CUDA_CHECK(cudaSetDevice(rank));
    const GroupSpec group{"pair", {0, 1}};
    auto comms = connect_nccl_groups(exchange, {group}, kTimeout, "pair");
    NcclCommunicator c(group, rank, comms[0], std::chrono::milliseconds(1000), nullptr, nullptr);
    check_collectives(c, rank);
    if (rank == 1) {  // stays away from the next all-reduce, alive until rank 0 gave up
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    DeviceBytes buf(4000);
    c.all_reduce(buf.data(), 1000, ElementType::float32);
    try {
      c.synchronize();
      ADD_FAILURE() << "synchronize returned although rank 1 never joined";
    } catch (const CommError& e) {
      EXPECT_TRUE(contains(e.what(),
                           "all_reduce on group 'pair' (world ranks 0,1, 4000 bytes) did not finish within "
                           "1000 ms of starting on the GPU: not every rank of the group arrived"))
          << e.what();
    }
    rank0_done = true;
  });
}

TEST(NcclGrid, TwoRanksCountBytesPerAxisAndKind) {
  REQUIRE_CUDA_DEVICES(2);
  run_ranks(2, [&](int rank, Exchange& exchange) {
    AXONN_CUDA_CHECK(cudaSetDevice(rank));
    CommGrid grid(exchange, parse_layout("1x2x1x1"), kTimeout, true, CommBackend::nccl);
    for (int a = 0; a < kCommAxisCount; ++a) check_collectives(grid.axis(static_cast<CommAxis>(a)), rank);
    grid.synchronize();
    // x and world have two ranks: per collective one call of its nccl-tests size; y, z and
    // data are groups of one and count nothing.
    for (CommAxis axis : {CommAxis::x, CommAxis::world}) {
      const auto& c = grid.counters()[static_cast<size_t>(axis)];
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::all_reduce)].calls, 2);
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::all_reduce)].bytes, 4000 + 128);
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::all_gather)].bytes, 24);
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::reduce_scatter)].bytes, 40);
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::broadcast)].bytes, 28);
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::barrier)].calls, 1);
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::all_to_all)].calls, 2);
      EXPECT_EQ(c[static_cast<size_t>(CollectiveKind::all_to_all)].bytes, 16 + 4);  // 2 blocks of 2; one float
    }
    for (CommAxis axis : {CommAxis::y, CommAxis::z, CommAxis::data, CommAxis::expert, CommAxis::expert_data})
      for (const auto& kind : grid.counters()[static_cast<size_t>(axis)]) EXPECT_EQ(kind.calls, 0);
  });
}

// The emulated NCCL (test_comm_nccl_emulated, AXONN_CUDA_EMULATOR) runs the ranks of a test
// as threads on its one device; on GPUs NCCL needs one device per rank.
#ifdef AXONN_CUDA_EMULATOR
constexpr bool kRanksShareADevice = true;
#else
constexpr bool kRanksShareADevice = false;
#endif
#define REQUIRE_A_DEVICE_PER_RANK(n) REQUIRE_CUDA_DEVICES(kRanksShareADevice ? 1 : (n))
void use_device_of(int rank) { AXONN_CUDA_CHECK(cudaSetDevice(kRanksShareADevice ? 0 : rank)); }

// All-to-all values, exact in bfloat16 too (integers below 256): element i of the block that
// group rank `from` sends to group rank `to`.
float block_value(int from, int to, size_t i) { return static_cast<float>(64 * from + 8 * to + static_cast<int>(i)); }

// Uneven counts with empty blocks (0 to 2 elements); the last rank sends nothing at all.
size_t uneven_count(int from, int to, int n) { return from == n - 1 ? 0 : static_cast<size_t>((from + 2 * to) % 3); }

// The blocks `me` sends (block_value(me, j, .) for each j), or expects to receive
// (block_value(j, me, .)), packed in group-rank order.
std::vector<float> packed_blocks(int me, const std::vector<size_t>& counts, bool received) {
  std::vector<float> v;
  for (size_t j = 0; j < counts.size(); ++j)
    for (size_t i = 0; i < counts[j]; ++i)
      v.push_back(received ? block_value(static_cast<int>(j), me, i) : block_value(me, static_cast<int>(j), i));
  return v;
}

// One all-to-all on device buffers, blocking or started (then finished); returns the bytes
// it should have been recorded with. Equal counts go through all_to_all, others through
// all_to_allv.
size_t exchange_and_check(Communicator& c, const std::vector<size_t>& send_counts,
                          const std::vector<size_t>& recv_counts, ElementType type, bool started) {
  const int g = c.rank();
  const std::vector<float> send = packed_blocks(g, send_counts, false), want = packed_blocks(g, recv_counts, true);
  const size_t element = element_size(type);
  DeviceBytes in(send.size() * element), out(want.size() * element);
  if (type == ElementType::float32) {
    in.upload(send.data(), send.size() * element);
  } else {
    std::vector<uint16_t> bf;
    for (float v : send) bf.push_back(float_to_bf16(v));
    in.upload(bf.data(), bf.size() * element);
  }
  out.fill_bytes(0xff);
  const bool equal =
      std::equal(send_counts.begin() + 1, send_counts.end(), send_counts.begin()) && send_counts == recv_counts;
  Communicator::Ticket ticket = 0;
  if (equal && started)
    ticket = c.start_all_to_all(in.data(), out.data(), send_counts[0], type);
  else if (equal)
    c.all_to_all(in.data(), out.data(), send_counts[0], type);
  else if (started)
    ticket = c.start_all_to_allv(in.data(), std::vector<size_t>(send_counts), out.data(),
                                 std::vector<size_t>(recv_counts), type);  // temporaries: gone at once
  else
    c.all_to_allv(in.data(), send_counts, out.data(), recv_counts, type);
  if (started) c.finish(ticket);
  c.synchronize();
  std::vector<float> got(want.size());
  if (type == ElementType::float32) {
    out.download(got.data(), got.size() * element);
  } else {
    std::vector<uint16_t> bf(want.size());
    out.download(bf.data(), bf.size() * element);
    for (size_t i = 0; i < bf.size(); ++i) got[i] = bf16_to_float(bf[i]);
  }
  EXPECT_EQ(got, want) << "group rank " << g << " of " << c.size() << ", " << element_type_name(type)
                       << (started ? ", started" : "");
  return send.size() * element;
}

// On the expert axis of "<n>x1x1x1e<n>" (one group of all n ranks): equal and uneven counts
// (empty blocks, a rank that sends nothing), float32 and bfloat16, blocking and started,
// started ones interleaved with an all-reduce on the same communicator; each counted as an
// all_to_all of the bytes the rank sends. Counts that do not fit the group throw.
void check_all_to_alls_on_the_expert_axis(int n) {
  run_ranks(n, [&](int rank, Exchange& exchange) {
    use_device_of(rank);
    const std::string layout = std::to_string(n) + "x1x1x1e" + std::to_string(n);
    CommGrid grid(exchange, parse_layout(layout), kTimeout, true, CommBackend::nccl);
    Communicator& c = grid.axis(CommAxis::expert);
    ASSERT_EQ(c.size(), n);
    const int g = c.rank();
    std::vector<size_t> equal(static_cast<size_t>(n), 3), empty(static_cast<size_t>(n), 0), send, receive;
    for (int j = 0; j < n; ++j) {
      send.push_back(uneven_count(g, j, n));
      receive.push_back(uneven_count(j, g, n));
    }
    size_t bytes = 0;
    int calls = 0;
    for (ElementType type : {ElementType::float32, ElementType::bfloat16})
      for (bool started : {false, true}) {
        bytes += exchange_and_check(c, equal, equal, type, started);
        bytes += exchange_and_check(c, send, receive, type, started);
        calls += 2;
      }
    bytes += exchange_and_check(c, empty, empty, ElementType::float32, false);
    ++calls;

    // Started all-to-alls around a started all-reduce: each result as if run alone.
    const std::vector<float> blocks = packed_blocks(g, equal, false);
    auto d_in = to_device(blocks);
    auto d_out = to_device(std::vector<float>(blocks.size(), -1.0f));
    auto d_sum = to_device(std::vector<float>(100, static_cast<float>(g + 1)));
    const auto first = c.start_all_to_all(d_in->data(), d_out->data(), 3, ElementType::float32);
    const auto reduce = c.start_all_reduce(d_sum->data(), 100, ElementType::float32);
    const auto second = c.start_all_to_all(d_out->data(), d_in->data(), 3, ElementType::float32);  // and back
    EXPECT_LT(first, reduce);
    EXPECT_LT(reduce, second);
    c.finish(second);
    c.synchronize();
    EXPECT_EQ(to_host<float>(*d_out, blocks.size()), packed_blocks(g, equal, true));
    EXPECT_EQ(to_host<float>(*d_in, blocks.size()), blocks);
    for (float v : to_host<float>(*d_sum, 100)) ASSERT_EQ(v, static_cast<float>(n * (n + 1) / 2));
    bytes += 2 * blocks.size() * sizeof(float);
    calls += 2;

    EXPECT_THROW(c.all_to_allv(d_in->data(), {1}, d_out->data(), receive, ElementType::float32), CommError);
    grid.synchronize();
    const auto& counted = grid.counters()[static_cast<size_t>(CommAxis::expert)];
    EXPECT_EQ(counted[static_cast<size_t>(CollectiveKind::all_to_all)].calls, calls);
    EXPECT_EQ(counted[static_cast<size_t>(CollectiveKind::all_to_all)].bytes, static_cast<int64_t>(bytes));
    EXPECT_EQ(counted[static_cast<size_t>(CollectiveKind::all_reduce)].calls, 1);
  });
}

TEST(NcclGrid, AllToAllOnTwoRanks) {
  REQUIRE_A_DEVICE_PER_RANK(2);
  check_all_to_alls_on_the_expert_axis(2);
}
TEST(NcclGrid, AllToAllOnThreeRanks) {
  REQUIRE_A_DEVICE_PER_RANK(3);
  check_all_to_alls_on_the_expert_axis(3);
}
TEST(NcclGrid, AllToAllOnFourRanks) {
  REQUIRE_A_DEVICE_PER_RANK(4);
  check_all_to_alls_on_the_expert_axis(4);
}

#endif  // AXONN_HAVE_CUDA

}  // namespace
}  // namespace axonn
