#pragma once
// What timing a GEMM shape's alternatives needs (the fastest cuBLASLt algorithm, a fused
// epilogue against the backend's kernels; gemm.cpp): outputs that leave the call's own alone,
// and a stopwatch on the call's stream.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>

#include "trainer/cuda/context.hpp"
#include "trainer/cuda/gemm.hpp"

namespace axonn::cuda {

// `call` with its outputs (C, aux where GELU_AUX_BIAS writes it, the bias gradient) moved into
// one fresh zeroed allocation, so that timing runs leave the call's own outputs as they were
// (beta != 0 accumulates into C); its inputs, and a DGELU's aux, are read in place. The
// allocation is freed when the probe goes, after the stream drained; release() does that
// checked. ok() is false when there was no memory for it: then nothing is timed.
class GemmProbe {
 public:
  GemmProbe(const Context& ctx, const char* op, const GemmCall& call);
  ~GemmProbe();
  GemmProbe(const GemmProbe&) = delete;
  GemmProbe& operator=(const GemmProbe&) = delete;

  bool ok() const { return scratch_ != nullptr; }
  const GemmCall& call() const { return probe_; }
  void release(const char* op);

 private:
  cudaStream_t stream_;
  void* scratch_ = nullptr;
  GemmCall probe_;
};

// Milliseconds of `runs` calls of `run` on ctx's stream, between two events, after one
// untimed call (which also does any first-call work of its own). run returns false when it
// could not run; then the result is +infinity.
class StreamStopwatch {
 public:
  StreamStopwatch(const Context& ctx, const char* op);
  ~StreamStopwatch();
  StreamStopwatch(const StreamStopwatch&) = delete;
  StreamStopwatch& operator=(const StreamStopwatch&) = delete;

  template <class Run>
  float milliseconds(int runs, Run&& run);

 private:
  float elapsed();  // between the last recorded start and end, waiting for the end
  void record(bool start);

  cudaStream_t stream_;
  const char* op_;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

template <class Run>
float StreamStopwatch::milliseconds(int runs, Run&& run) {
  if (!run()) return std::numeric_limits<float>::infinity();
  record(true);
  for (int r = 0; r < runs; ++r)
    if (!run()) return std::numeric_limits<float>::infinity();
  record(false);
  return elapsed();
}

}  // namespace axonn::cuda
