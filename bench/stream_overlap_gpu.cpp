// What one GPU shows of the tensor-parallel overlap: a GEMM on the CUDA backend's compute
// stream beside a collective-sized device-to-device copy on a second stream of the highest
// priority (as NcclCommunicator's stream; a group of one copies there, and a copy engine moves
// the bytes as NCCL's kernels would), each alone and both at once, on GPU 0:
//   build/bench/bench_stream_overlap_gpu [--m 8192] [--n 4096] [--k 4096] [--copy-mib 256]
//                                        [--reps 10]
// concurrency = (GEMM alone + copy alone) / both at once: 1 when the GPU serializes the two
// streams, up to 2 when each runs entirely beside the other; hidden = (GEMM + copy - both) /
// the shorter of the two: the fraction of the shorter one the other hides. Times are the
// median over 5 rounds of `reps` back-to-back GEMMs (and copies), after one untimed round.
// Without a CUDA device it says so in one line and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_stats.hpp"
#include "comm/cuda_check.hpp"
#include "comm/cuda_device.hpp"
#include "trainer/cuda/cuda_backend.hpp"

using namespace axonn;
using namespace axonn::bench;

namespace {

struct Options {
  int64_t m = 8192, n = 4096, k = 4096;
  int copy_mib = 256;
  int reps = 10;
};

const std::vector<OptionSpec> kOptions = {
    {"m", true, "GEMM rows (default 8192)"},
    {"n", true, "GEMM columns (default 4096)"},
    {"k", true, "GEMM inner size (default 4096)"},
    {"copy-mib", true, "MiB each copy moves (default 256)"},
    {"reps", true, "GEMMs and copies per timed round (default 10)"},
    {"help", false, "this help"},
};

Options read_options(const Args& args) {
  no_positionals(args);
  Options o;
  o.m = count_option(args, "m", static_cast<int>(o.m));
  o.n = count_option(args, "n", static_cast<int>(o.n));
  o.k = count_option(args, "k", static_cast<int>(o.k));
  o.copy_mib = count_option(args, "copy-mib", o.copy_mib);
  o.reps = count_option(args, "reps", o.reps);
  return o;
}

// Seconds of one round of `work` (queued on the two streams, then both waited for): the
// median of 5 rounds after one untimed.
double round_seconds(cudaStream_t compute, cudaStream_t comm, const std::function<void()>& work) {
  const auto timed = [&] {
    const auto start = Clock::now();
    work();
    AXONN_CUDA_CHECK(cudaStreamSynchronize(compute));
    AXONN_CUDA_CHECK(cudaStreamSynchronize(comm));
    return seconds_since(start);
  };
  timed();
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) rounds.push_back(timed());
  return median(rounds);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_bench_args(argc, argv, kOptions, "bench_stream_overlap_gpu [options]", read_options);
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("bench_stream_overlap_gpu: no CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  select_cuda_device(0, 1);
  CudaBackendOptions options;
  options.activations = ElementType::bfloat16;  // the GEMMs on bf16 tensor cores, as training.dtype = "bfloat16"
  const std::unique_ptr<Backend> owned = make_cuda_backend(options);
  Backend& backend = *owned;
  const auto compute = static_cast<cudaStream_t>(cuda_stream_of(backend));
  int least = 0, greatest = 0;
  AXONN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t comm = nullptr;
  AXONN_CUDA_CHECK(cudaStreamCreateWithPriority(&comm, cudaStreamNonBlocking, greatest));

  const ElementType type = backend.activation_type();
  const size_t e = element_size(type);
  DeviceBuffer<std::byte> a(backend, static_cast<size_t>(o.m * o.k) * e), b(backend, static_cast<size_t>(o.k * o.n) * e),
      c(backend, static_cast<size_t>(o.m * o.n) * e);
  backend.memset_zero(a.data(), static_cast<size_t>(o.m * o.k) * e);
  backend.memset_zero(b.data(), static_cast<size_t>(o.k * o.n) * e);
  const size_t copy_bytes = static_cast<size_t>(o.copy_mib) << 20;
  DeviceBuffer<std::byte> from(backend, copy_bytes), to(backend, copy_bytes);
  backend.memset_zero(from.data(), copy_bytes);

  const auto gemms = [&] {
    for (int i = 0; i < o.reps; ++i)
      backend.gemm(Transpose::no, Transpose::no, o.m, o.n, o.k, 1.0f, ConstActPtr(a.data(), type), o.k,
                   ConstActPtr(b.data(), type), o.n, 0.0f, ActPtr(c.data(), type), o.n);
  };
  const auto copies = [&] {
    for (int i = 0; i < o.reps; ++i)
      AXONN_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), copy_bytes, cudaMemcpyDeviceToDevice, comm));
  };
  AXONN_CUDA_CHECK(cudaStreamSynchronize(compute));
  const double gemm_s = round_seconds(compute, comm, gemms);
  const double copy_s = round_seconds(compute, comm, copies);
  const double both_s = round_seconds(compute, comm, [&] {
    copies();
    gemms();
  });
  const double flops = 2.0 * static_cast<double>(o.m) * static_cast<double>(o.n) * static_cast<double>(o.k) * o.reps;
  std::printf("GPU 0, %s GEMM %lld x %lld x %lld and a %d MiB device copy on a second stream (priority %d), %d of each "
              "per round\n",
              element_type_name(type), static_cast<long long>(o.m), static_cast<long long>(o.n),
              static_cast<long long>(o.k), o.copy_mib, greatest, o.reps);
  std::printf("%-22s %10s %14s\n", "", "ms/round", "rate");
  std::printf("%-22s %10.3f %10.1f TFLOP/s\n", "GEMMs alone", gemm_s * 1e3, flops / gemm_s / 1e12);
  std::printf("%-22s %10.3f %10.1f GB/s\n", "copies alone", copy_s * 1e3,
              2.0 * static_cast<double>(copy_bytes) * o.reps / copy_s / 1e9);
  std::printf("%-22s %10.3f\n", "both at once", both_s * 1e3);
  std::printf("concurrency %.2fx (1: serialized, 2: fully beside each other), hidden %.0f%% of the shorter\n",
              (gemm_s + copy_s) / both_s, 100.0 * (gemm_s + copy_s - both_s) / std::min(gemm_s, copy_s));
  AXONN_CUDA_CHECK(cudaStreamDestroy(comm));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_stream_overlap_gpu: %s\n", e.what());
  return 1;
}
