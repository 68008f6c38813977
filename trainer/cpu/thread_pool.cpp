#include "trainer/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "trainer/cpu/check.hpp"

namespace axonn::cpu {
namespace {

// How long a thread polls before it sleeps: long enough to catch the next op of a sequence
// (LayerNorm's stages, an op after a short GEMM), short next to a GEMM of a training step.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until `value` differs from `old`: polls for kSpin, then sleeps in atomic::wait.
template <typename T>
T wait_for_change(const std::atomic<T>& value, T old) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
  }
  for (;;) {
    value.wait(old, std::memory_order_acquire);
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
  }
}

}  // namespace

ThreadPool::ThreadPool(int size) : size_(size) {
  if (size < 1) fail("ThreadPool", "size = " + std::to_string(size) + " must be at least 1");
  for (int i = 1; i < size; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::finish_part(std::exception_ptr error) {
  if (error) {
    while (error_lock_.test_and_set(std::memory_order_acquire)) cpu_relax();
    if (!error_) error_ = error;
    error_lock_.clear(std::memory_order_release);
  }
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    seen = wait_for_change(generation_, seen);
    if (stop_.load(std::memory_order_acquire)) return;
    std::exception_ptr error;
    try {
      (*task_)(index);
    } catch (...) {
      error = std::current_exception();
    }
    finish_part(error);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(const std::function<void(int)>& task) {
  if (size_ == 1) {
    task(0);
    return;
  }
  task_ = &task;
  error_ = nullptr;
  pending_.store(size_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);  // publishes task_ and pending_
  generation_.notify_all();
  std::exception_ptr error;
  try {
    task(0);
  } catch (...) {
    error = std::current_exception();
  }
  finish_part(error);
  for (int left = pending_.load(std::memory_order_acquire); left != 0;) left = wait_for_change(pending_, left);
  task_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void parallel_for(ThreadPool& pool, int64_t n, int64_t min_parallel, int64_t align,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t parts = pool.size();
  if (parts == 1 || n < min_parallel) {
    body(0, n);
    return;
  }
  // Part i covers [i·step, (i+1)·step), step rounded up to a multiple of align.
  const int64_t a = std::max<int64_t>(1, align);
  const int64_t step = ((n + parts - 1) / parts + a - 1) / a * a;
  pool.run([&](int i) {
    const int64_t begin = std::min(n, i * step), end = std::min(n, begin + step);
    if (begin < end) body(begin, end);
  });
}

}  // namespace axonn::cpu
