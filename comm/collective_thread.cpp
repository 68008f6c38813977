#include "comm/collective_thread.hpp"

namespace axonn {
namespace {
thread_local bool collective_thread = false;
}  // namespace

CollectiveThread::CollectiveThread() : thread_([this] { loop(); }) {}

CollectiveThread::~CollectiveThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

uint64_t CollectiveThread::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
    ++submitted_;
  }
  changed_.notify_all();
  return submitted_;
}

void CollectiveThread::wait(uint64_t ticket) {
  std::unique_lock lock(mutex_);
  if (done_ < ticket) {
    const auto start = std::chrono::steady_clock::now();
    changed_.wait(lock, [&] { return done_ >= ticket; });
    waited_ += std::chrono::steady_clock::now() - start;
  }
  if (error_) std::rethrow_exception(error_);
}

std::chrono::nanoseconds CollectiveThread::waited() const {
  std::lock_guard lock(mutex_);
  return waited_;
}

bool CollectiveThread::on_collective_thread() { return collective_thread; }

void CollectiveThread::loop() {
  collective_thread = true;
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    if (!error_) {
      lock.unlock();
      std::exception_ptr failure;
      try {
        task();
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      if (failure) error_ = failure;
    }
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace axonn
