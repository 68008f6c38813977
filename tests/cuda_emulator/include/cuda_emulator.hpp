#pragma once
// A CPU emulation of the CUDA execution model, so the CUDA backend's kernels run (and their
// tests pass or fail) on machines without a GPU: CI compiles trainer/cuda/*.cu as C++
// (translate_cu.py rewrites the launches and __shared__ declarations) against this header
// and the emulated runtime, cuBLASLt, CUB, NCCL and tensor-core (trainer/cuda/warp_mma.cuh)
// headers beside it.
//
// Execution: every CUDA thread of a block is a fiber on the calling OS thread.
// One fiber runs at a time and keeps running until it waits at a barrier (__syncthreads,
// __syncwarp, a shuffle) or returns; blocks run one after another. So a thread that reads
// shared memory another thread has not yet written (a missing barrier) reads it as it was:
// shared memory starts 0xff-filled (NaN as float, bf16 and double), device memory 0xa5.
// What it checks: indexing, masks, barriers, launch limits (1024 threads, dynamic shared
// memory over 48 KiB only after cudaFuncSetAttribute, at most 227 KiB), ldmatrix row
// alignment, async copies read before their wait (done only at the wait) or never waited for,
// writes outside a device buffer (guard bytes checked at cudaFree). What it cannot: timing, the memory model beyond barriers, shuffles
// from lanes that diverged, device math's last bits (expf here is glibc's).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <typeinfo>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

// Switching between fibers: save the callee-saved registers on the current stack, store its
// stack pointer in *save, load `load` and pop the registers saved there. No system call
// (ucontext's swapcontext saves the signal mask with one per switch, which made kernels with
// barriers 10x slower). x86-64 System V only; other targets are not emulated.
#if !defined(__x86_64__)
#error "the CUDA emulator's fibers switch with x86-64 code"
#endif
extern "C" void cuda_emulator_switch(void** save, void* load);
asm(R"(
  .text
  .globl cuda_emulator_switch
  .weak cuda_emulator_switch
  .type cuda_emulator_switch, @function
cuda_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_emulator_switch, .-cuda_emulator_switch
)");

namespace cuda_emulator {

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "cuda_emulator: %s\n", what);
  std::abort();
}

// Threads wait at a barrier until `expected` of them (the block's or the warp's live
// threads) have arrived; then its generation advances and they all go on.
struct Barrier {
  int expected = 0, arrived = 0;
  uint64_t generation = 0;
};

// A 16-byte cp.async a thread has issued (trainer/cuda/async_copy.cuh): done at the wait that
// covers its group, so a read before that wait sees the destination as it was.
struct AsyncCopy {
  void* dst;
  const void* src;
  bool valid;  // false: zero-fill
};

struct Fiber {
  void* stack_pointer = nullptr;  // where its registers are saved while it is switched out
  std::unique_ptr<char[]> stack;
  dim3 thread;
  bool done = false;
  const Barrier* waiting = nullptr;
  uint64_t waiting_generation = 0;
  std::vector<AsyncCopy> open_copies;                // issued since the last commit
  std::vector<std::vector<AsyncCopy>> copy_groups;  // committed, oldest first
};

// The block being run: its fibers, barriers, shuffle slots and shared memory.
struct Block {
  void* scheduler = nullptr;  // the scheduler's saved stack pointer
  std::vector<Fiber>* fibers = nullptr;
  size_t current = 0;
  Barrier all;
  std::vector<Barrier> warps;
  std::vector<std::array<uint64_t, 32>> shuffle_slots;  // two sets per warp
  unsigned char* dynamic_shared = nullptr;
  std::map<std::pair<int, size_t>, std::unique_ptr<unsigned char[]>> static_shared;  // (line, type) -> storage
  const std::function<void()>* kernel_call = nullptr;
};
inline thread_local Block* block = nullptr;

inline int linear_thread() {
  return static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
}

inline void arrive(Barrier& b) {
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  Fiber& me = (*block->fibers)[block->current];
  me.waiting = &b;
  me.waiting_generation = b.generation;
  cuda_emulator_switch(&me.stack_pointer, block->scheduler);
}

inline Fiber& current_fiber() { return (*block->fibers)[block->current]; }

inline Barrier& my_warp_barrier() { return block->warps[static_cast<size_t>(linear_thread() / 32)]; }

inline unsigned char* dynamic_shared() { return block->dynamic_shared; }

// The block's instance of `__shared__ T name;` declared at `line` (translate_cu.py).
template <typename T>
T& block_static(int line) {
  auto& slot = block->static_shared[{line, typeid(T).hash_code()}];
  if (!slot) {
    slot.reset(new unsigned char[sizeof(T)]);
    std::memset(slot.get(), 0xff, sizeof(T));
  }
  return *reinterpret_cast<T*>(slot.get());
}

// Every lane of the warp publishes v into the warp's slots (one per lane), then waits at one
// warp barrier; the slots it returns hold all 32 values, by lane. The slots alternate with the
// barrier's generation, so the next exchange writes the other set while slow lanes may still
// read this one; the one after that comes after another barrier, which every lane reaches
// only after its read. Shuffles, and the warp-wide PTX the
// emulator computes from the lanes' registers (trainer/cuda/warp_mma.cuh).
template <typename T>
const std::array<uint64_t, 32>& publish_to_warp(T v) {
  static_assert(sizeof(T) <= 8, "a lane publishes at most 8 bytes");
  const size_t warp = static_cast<size_t>(linear_thread() / 32);
  Barrier& barrier = block->warps[warp];
  auto& slots = block->shuffle_slots[2 * warp + barrier.generation % 2];
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  slots[static_cast<size_t>(linear_thread() % 32)] = bits;
  arrive(barrier);
  return slots;
}

template <typename T>
T lane_value(const std::array<uint64_t, 32>& slots, size_t lane) {
  T v;
  std::memcpy(&v, &slots[lane], sizeof(T));
  return v;
}

// Every lane publishes v and gets all 32 values, by lane.
template <typename T>
std::array<T, 32> warp_values(T v) {
  const auto& slots = publish_to_warp(v);
  std::array<T, 32> all;
  for (size_t lane = 0; lane < 32; ++lane) all[lane] = lane_value<T>(slots, lane);
  return all;
}

// Every lane publishes v, then reads lane src's (only that one: shuffles are most of what
// the emulated kernels do).
template <typename T>
T shuffle(T v, int src) {
  return lane_value<T>(publish_to_warp(v), static_cast<size_t>(src & 31));
}

// The runtime's last error (a cudaError_t) and the kernels' opted-in shared memory, per
// OS thread: tests run ranks as threads, each with its own backend.
struct RuntimeState {
  int last_error = 0;
  std::map<const void*, size_t> max_dynamic_shared;
};
inline RuntimeState& runtime() {
  thread_local RuntimeState state;
  return state;
}

// A fiber's first frame: runs the kernel, then hands back to the scheduler for good.
[[noreturn]] inline void fiber_main() {
  (*block->kernel_call)();
  Fiber& me = (*block->fibers)[block->current];
  me.done = true;
  cuda_emulator_switch(&me.stack_pointer, block->scheduler);
  die("a finished fiber was resumed");
}

// A new fiber's stack, as cuda_emulator_switch leaves a switched-out one: six register slots
// (zeros), then fiber_main as the return address, 16-byte aligned so that fiber_main starts
// with the stack alignment of a called function.
inline void* fresh_stack(char* stack, size_t bytes) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
  auto* slots = reinterpret_cast<void**>(top - 16);  // the return address, at a multiple of 16
  slots[0] = reinterpret_cast<void*>(&fiber_main);
  for (int i = 1; i <= 6; ++i) slots[-i] = nullptr;
  return slots - 6;
}

inline bool launch_is_valid(const void* kernel, dim3 grid, dim3 threads_per_block, size_t shared) {
  const uint64_t threads = uint64_t(threads_per_block.x) * threads_per_block.y * threads_per_block.z;
  const char* why = nullptr;
  if (threads == 0 || threads > 1024)
    why = "threads per block must be 1 .. 1024";
  else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    why = "grid dimensions out of range";
  else if (shared > 227 * 1024)
    why = "dynamic shared memory over 227 KiB";
  else if (shared > 48 * 1024) {
    const auto it = runtime().max_dynamic_shared.find(kernel);
    if (it == runtime().max_dynamic_shared.end() || it->second < shared)
      why = "dynamic shared memory over 48 KiB without cudaFuncAttributeMaxDynamicSharedMemorySize";
  }
  if (why == nullptr) return true;
  std::fprintf(stderr, "cuda_emulator: launch fails: %s\n", why);
  runtime().last_error = 1;  // cudaErrorInvalidValue, for cudaGetLastError
  return false;
}

constexpr size_t kStackBytes = 96 * 1024;  // a lane of a tensor-core kernel keeps ~1 KiB of registers

// Fiber stacks outlive a launch: each launch borrows one per thread from its OS thread's idle
// stacks and returns them when its grid is done (a launch inside a kernel borrows others).
// Allocated per launch instead (24 MiB for a block of 256 threads), every launch went through
// the kernel: glibc hands the freed top of the heap back to the system and the next launch
// faulted it in again, a third of the emulated tests' time.
class BorrowedStacks {
 public:
  explicit BorrowedStacks(std::vector<Fiber>& fibers) : fibers_(fibers) {
    for (Fiber& f : fibers_) {
      if (idle().empty()) {
        f.stack.reset(new char[kStackBytes]);
        continue;
      }
      f.stack = std::move(idle().back());
      idle().pop_back();
    }
  }
  ~BorrowedStacks() {
    for (Fiber& f : fibers_) idle().push_back(std::move(f.stack));
  }
  BorrowedStacks(const BorrowedStacks&) = delete;
  BorrowedStacks& operator=(const BorrowedStacks&) = delete;

 private:
  static std::vector<std::unique_ptr<char[]>>& idle() {
    thread_local std::vector<std::unique_ptr<char[]>> stacks;
    return stacks;
  }
  std::vector<Fiber>& fibers_;
};

// Runs one block's fibers until all have returned.
inline void run_block(Block& b, std::vector<Fiber>& fibers) {
  for (size_t t = 0; t < fibers.size(); ++t) {
    Fiber& f = fibers[t];
    f.done = false;
    f.waiting = nullptr;
    f.thread = dim3(static_cast<unsigned>(t % blockDim.x), static_cast<unsigned>(t / blockDim.x % blockDim.y),
                    static_cast<unsigned>(t / (uint64_t(blockDim.x) * blockDim.y)));
    f.stack_pointer = fresh_stack(f.stack.get(), kStackBytes);
  }
  size_t live = fibers.size();
  while (live > 0) {
    bool progress = false;
    for (size_t t = 0; t < fibers.size(); ++t) {
      Fiber& f = fibers[t];
      if (f.done || (f.waiting != nullptr && f.waiting->generation == f.waiting_generation)) continue;
      f.waiting = nullptr;
      b.current = t;
      threadIdx = f.thread;
      cuda_emulator_switch(&b.scheduler, f.stack_pointer);
      progress = true;
      if (!f.done) continue;
      if (!f.open_copies.empty() || !f.copy_groups.empty())
        die("a thread returned with async copies it never waited for (cp.async without cp.async.wait_group)");
      --live;
      // A thread that has returned no longer holds back its block's or its warp's barriers.
      for (Barrier* bar : {&b.all, &b.warps[t / 32]}) {
        if (--bar->expected > 0 && bar->arrived == bar->expected) {
          bar->arrived = 0;
          ++bar->generation;
        }
      }
    }
    if (!progress) die("deadlock: threads wait at a barrier the others never reach");
  }
}

inline void run_grid(const void* kernel, dim3 grid, dim3 threads_per_block, size_t shared,
                     const std::function<void()>& kernel_call) {
  if (!launch_is_valid(kernel, grid, threads_per_block, shared)) return;
  const size_t threads = size_t(threads_per_block.x) * threads_per_block.y * threads_per_block.z;
  const size_t warps = (threads + 31) / 32;
  const size_t shared_bytes = (shared + 255) / 256 * 256 + 256;
  std::unique_ptr<unsigned char, void (*)(void*)> dynamic(static_cast<unsigned char*>(std::aligned_alloc(256, shared_bytes)),
                                                          std::free);
  std::vector<Fiber> fibers(threads);
  const BorrowedStacks stacks(fibers);
  Block* outer = block;
  Block b;
  block = &b;
  gridDim = grid;
  blockDim = threads_per_block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3(x, y, z);
        b.fibers = &fibers;
        b.kernel_call = &kernel_call;
        b.all = Barrier{static_cast<int>(threads)};
        b.warps.assign(warps, Barrier{});
        for (size_t w = 0; w < warps; ++w) b.warps[w].expected = static_cast<int>(std::min<size_t>(32, threads - 32 * w));
        b.shuffle_slots.assign(2 * warps, {});
        b.static_shared.clear();
        std::memset(dynamic.get(), 0xff, shared_bytes);
        b.dynamic_shared = dynamic.get();
        run_block(b, fibers);
      }
  block = outer;
}

// kernel<<<grid, threads, shared, stream>>>(args...) becomes launch(kernel, grid, threads, shared, stream)(args...).
template <typename Kernel>
struct Launch {
  Kernel kernel;
  dim3 grid, threads;
  size_t shared;
  template <typename... Args>
  void operator()(Args... args) const {
    const std::function<void()> call = [&] { kernel(args...); };
    run_grid(reinterpret_cast<const void*>(kernel), grid, threads, shared, call);
  }
};
template <typename Kernel>
Launch<Kernel> launch(Kernel kernel, dim3 grid, dim3 threads, size_t shared = 0, const void* stream = nullptr) {
  (void)stream;  // one in-order queue: everything runs at once
  return Launch<Kernel>{kernel, grid, threads, shared};
}

}  // namespace cuda_emulator

inline void __syncthreads() { cuda_emulator::arrive(cuda_emulator::block->all); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuda_emulator::arrive(cuda_emulator::my_warp_barrier()); }
template <typename T>
T __shfl_sync(unsigned, T v, int src, int = 32) {
  return cuda_emulator::shuffle(v, src);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int = 32) {
  return cuda_emulator::shuffle(v, (cuda_emulator::linear_thread() % 32) ^ lane_mask);
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
inline float __fmul_rn(float a, float b) { return a * b; }
