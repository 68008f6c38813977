#pragma once
// The CUDA runtime calls the trainer makes, on host memory (cuda_emulator.hpp): one device,
// streams that run everything at once, launches checked against the GPU's limits.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda_emulator.hpp"
#include "cuda_emulator_streams.hpp"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
};
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
#define cudaStreamPerThread (static_cast<cudaStream_t>(nullptr))
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };

// The vector types the kernels use (vector_types.h): uint4 copies 16 bytes, float2 pairs sums.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
struct alignas(8) float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }

inline cudaError_t cudaGetLastError() {
  const int e = cuda_emulator::runtime().last_error;
  cuda_emulator::runtime().last_error = 0;
  return static_cast<cudaError_t>(e);
}
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated CUDA error"; }

inline cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
// The emulated device's memory: an H100's 80 GiB, or AXONN_EMULATED_GPU_MIB mebibytes, so
// that a test can fill it. cudaMalloc fails, as on a full GPU, when the buffers in use (rounded
// as allocated) would pass it; cudaGetDeviceProperties reports it.
namespace cuda_emulator {
inline size_t device_memory_bytes() {
  static const size_t bytes = [] {
    const char* mib = std::getenv("AXONN_EMULATED_GPU_MIB");
    return mib != nullptr && *mib != '\0' ? static_cast<size_t>(std::strtoull(mib, nullptr, 10)) << 20
                                          : size_t{80} << 30;
  }();
  return bytes;
}
inline std::atomic<size_t>& device_bytes_in_use() {
  static std::atomic<size_t> bytes{0};
  return bytes;
}
}  // namespace cuda_emulator

// The one emulated device describes itself as an H100 SXM, whose limits the launches are
// checked against (cuda_emulator.hpp).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int multiProcessorCount;
  int major, minor;
};
enum cudaDeviceAttr { cudaDevAttrClockRate = 13 };
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* props, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *props = cudaDeviceProp{};
  std::strcpy(props->name, "emulated H100 SXM (CPU)");
  props->totalGlobalMem = cuda_emulator::device_memory_bytes();
  props->multiProcessorCount = 132;
  props->major = 9;
  props->minor = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device != 0 || attribute != cudaDevAttrClockRate) return cudaErrorInvalidValue;
  *value = 1'980'000;  // kHz
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new CUstream_st;
  return cudaSuccess;
}
// The NCCL communicators' streams: queues (cuda_emulator_streams.hpp).
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned, int) {
  *stream = new CUstream_st{true, {}};
  std::lock_guard lock(cuda_emulator::queues().mutex);
  cuda_emulator::queues().streams.insert(*stream);
  return cudaSuccess;
}
// A queued stream's items still run (CUDA frees a stream once its work is done).
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!cuda_emulator::is_queued(stream)) {
    delete stream;
    return cudaSuccess;
  }
  std::unique_lock lock(cuda_emulator::queues().mutex);
  cuda_emulator::wait_until(lock, [&] { return stream->items.empty(); });
  cuda_emulator::queues().streams.erase(stream);
  delete stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!cuda_emulator::is_queued(stream)) return cudaSuccess;
  std::unique_lock lock(cuda_emulator::queues().mutex);
  cuda_emulator::wait_until(lock, [&] { return stream->items.empty(); });
  return cudaSuccess;
}

inline cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) { return cudaEventCreate(event); }
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {  // queued records hold the state
  delete event;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::shared_ptr<cuda_emulator::Event> e = event->event;
  if (!cuda_emulator::is_queued(stream)) {
    std::lock_guard lock(cuda_emulator::queues().mutex);
    e->completed = ++e->recorded;
    e->at = std::chrono::steady_clock::now();
    return cudaSuccess;
  }
  uint64_t record = 0;
  {
    std::lock_guard lock(cuda_emulator::queues().mutex);
    record = ++e->recorded;
  }
  cuda_emulator::enqueue(stream, [e, record] {
    if (record > e->completed) {
      e->completed = record;
      e->at = std::chrono::steady_clock::now();
    }
    return true;
  });
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard lock(cuda_emulator::queues().mutex);
  cuda_emulator::progress_locked();
  return event->event->completed == event->event->recorded ? cudaSuccess : cudaErrorNotReady;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock lock(cuda_emulator::queues().mutex);
  const auto& e = event->event;
  cuda_emulator::wait_until(lock, [&] { return e->completed == e->recorded; });
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard lock(cuda_emulator::queues().mutex);
  *ms = std::chrono::duration<float, std::milli>(end->event->at - start->event->at).count();
  return cudaSuccess;
}
// Work after the wait starts once the event's newest record (at the time of the call) is
// done: a queued stream queues the wait, an ordinary stream's caller blocks until then.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  std::shared_ptr<cuda_emulator::Event> e = event->event;
  std::unique_lock lock(cuda_emulator::queues().mutex);
  const uint64_t record = e->recorded;
  if (!cuda_emulator::is_queued(stream)) {
    cuda_emulator::wait_until(lock, [&] { return e->completed >= record; });
    return cudaSuccess;
  }
  lock.unlock();
  cuda_emulator::enqueue(stream, [e, record] { return e->completed >= record; });
  return cudaSuccess;
}

// 256-byte aligned like cudaMalloc, and not zeroed: 0xa5 bytes, so an unwritten output
// shows. Guard bytes before the buffer and from its last byte on are checked at cudaFree: a
// kernel or copy that wrote outside its buffer stops the emulator there.
namespace cuda_emulator {
constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuard = 0xff;  // NaN as float and bf16: a read outside shows too
inline size_t rounded(size_t bytes) { return (bytes + 255) / 256 * 256; }
// What cudaMalloc allocates for `bytes`: the buffer, rounded, between its two guards.
inline size_t guarded_bytes(size_t bytes) { return 2 * kGuardBytes + rounded(bytes); }

// Freed buffers of 1 MiB and more wait here for the next cudaMalloc of the same size, as in
// CUDA's caching allocators: every backend allocates a 32 MiB cuBLASLt workspace, and a fresh
// mapping of it each time (glibc maps and unmaps blocks this large) cost more page faults than
// the test's kernels took. Smaller buffers go back to malloc, where AddressSanitizer still
// sees a use after cudaFree. Kept: at most 256 MiB; ranks are threads, hence the mutex.
class CachedBuffers {
 public:
  static constexpr size_t kSmallest = size_t{1} << 20;
  static CachedBuffers& instance() {
    static CachedBuffers cache;
    return cache;
  }
  unsigned char* take(size_t block_bytes) {
    if (block_bytes < kSmallest) return nullptr;
    const std::lock_guard lock(mutex_);
    const auto it = free_.find(block_bytes);
    if (it == free_.end()) return nullptr;
    unsigned char* buffer = it->second;
    free_.erase(it);
    kept_bytes_ -= block_bytes;
    return buffer;
  }
  // False: not kept (small, or the cache is full); the caller frees it.
  bool keep(unsigned char* buffer, size_t block_bytes) {
    if (block_bytes < kSmallest) return false;
    const std::lock_guard lock(mutex_);
    if (kept_bytes_ + block_bytes > kMostKept) return false;
    free_.emplace(block_bytes, buffer);
    kept_bytes_ += block_bytes;
    return true;
  }
  ~CachedBuffers() {
    for (const auto& [bytes, buffer] : free_) std::free(buffer);
  }

 private:
  static constexpr size_t kMostKept = size_t{256} << 20;
  std::mutex mutex_;
  std::multimap<size_t, unsigned char*> free_;  // block bytes (guards included) -> block
  size_t kept_bytes_ = 0;
};
}  // namespace cuda_emulator
inline cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  using namespace cuda_emulator;
  if (device_bytes_in_use().fetch_add(rounded(bytes)) + rounded(bytes) > device_memory_bytes()) {
    device_bytes_in_use() -= rounded(bytes);
    return cudaErrorMemoryAllocation;
  }
  unsigned char* base = CachedBuffers::instance().take(guarded_bytes(bytes));
  if (base == nullptr) base = static_cast<unsigned char*>(std::aligned_alloc(256, guarded_bytes(bytes)));
  if (base == nullptr) {
    device_bytes_in_use() -= rounded(bytes);
    return cudaErrorMemoryAllocation;
  }
  std::memset(base, kGuard, kGuardBytes);
  std::memcpy(base, &bytes, sizeof bytes);  // the size, in the front guard's first bytes
  std::memset(base + kGuardBytes, 0xa5, bytes);
  std::memset(base + kGuardBytes + bytes, kGuard, rounded(bytes) - bytes + kGuardBytes);
  *ptr = base + kGuardBytes;
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* ptr) {
  using namespace cuda_emulator;
  if (ptr == nullptr) return cudaSuccess;
  unsigned char* base = static_cast<unsigned char*>(ptr) - kGuardBytes;
  size_t bytes = 0;
  std::memcpy(&bytes, base, sizeof bytes);
  for (size_t i = sizeof bytes; i < kGuardBytes; ++i)
    if (base[i] != kGuard) die("cudaFree: something wrote before the start of this device buffer");
  const unsigned char* tail = base + kGuardBytes + bytes;
  for (size_t i = 0; i < rounded(bytes) - bytes + kGuardBytes; ++i)
    if (tail[i] != kGuard) die("cudaFree: something wrote past the end of this device buffer");
  if (!CachedBuffers::instance().keep(base, guarded_bytes(bytes))) std::free(base);
  device_bytes_in_use() -= rounded(bytes);
  return cudaSuccess;
}
template <typename T>  // the typed overload of the runtime's C++ API
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  *ptr = static_cast<T*>(p);
  return e;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  if (!cuda_emulator::is_queued(stream)) {
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
  }
  cuda_emulator::enqueue(stream, [=] {
    std::memcpy(dst, src, bytes);
    return true;
  });
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t) {
  if (width > dst_pitch || width > src_pitch) return cudaErrorInvalidValue;
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (cuda_emulator::is_queued(stream)) cuda_emulator::die("cudaMemsetAsync on a queued stream is not emulated");
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 227 * 1024)
    return cudaErrorInvalidValue;
  cuda_emulator::runtime().max_dynamic_shared[reinterpret_cast<const void*>(kernel)] = static_cast<size_t>(value);
  return cudaSuccess;
}
