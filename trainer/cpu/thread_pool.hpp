#pragma once
// The CPU backend's threads, for every op, GEMMs included (gemm.hpp). A pool of
// `size` threads, the caller being the first: run(task) calls task(0) on the caller and
// task(1) .. task(size-1) on the workers, and returns when all are done.
//
// Every op splits its work into fixed parts by index (rows, columns or elements), and each
// output element is computed by exactly one part with the same arithmetic as a serial loop,
// so results are bitwise equal for every thread count (reductions keep their serial order:
// see each op), but for a split GEMM's (gemm.hpp). Workers poll for up to 50 µs after a task,
// then sleep, so that between steps and during collectives they leave the cores to the node's
// other ranks.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace axonn::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int size);  // size >= 1; size - 1 worker threads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  // task(i) for i in [0, size()), i = 0 on the caller. Not reentrant: a task must not call
  // run(). The first exception a task throws is rethrown here, after every part finished.
  void run(const std::function<void(int)>& task);

 private:
  void work(int index);
  void finish_part(std::exception_ptr error);

  int size_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per run(); workers wait for a change
  std::atomic<int> pending_{0};          // workers still running the current task
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::atomic_flag error_lock_ = ATOMIC_FLAG_INIT;
};

// Splits [0, n) into at most pool.size() contiguous parts whose boundaries are multiples of
// `align` (elements; 16 floats = one cache line, so no two threads write the same line) and
// calls body(begin, end) once per non-empty part. Runs body(0, n) on the caller alone when
// n < min_parallel (small ops cost less than waking a thread).
void parallel_for(ThreadPool& pool, int64_t n, int64_t min_parallel, int64_t align,
                  const std::function<void(int64_t, int64_t)>& body);

// Work sizes (elements touched) below which an op stays on one thread.
constexpr int64_t kMinParallelElements = 1 << 15;
constexpr int64_t kCacheLineFloats = 16;

// parallel_for over the m rows of a (m, row_elements) operand, aligned to cache lines for
// flat element ranges: the two shapes every op uses.
inline void parallel_rows(ThreadPool& pool, int64_t m, int64_t row_elements,
                          const std::function<void(int64_t, int64_t)>& body) {
  const int64_t per_row = row_elements > 0 ? row_elements : 1;
  parallel_for(pool, m, (kMinParallelElements + per_row - 1) / per_row, 1, body);
}
inline void parallel_elements(ThreadPool& pool, int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  parallel_for(pool, n, kMinParallelElements, kCacheLineFloats, body);
}

}  // namespace axonn::cpu
