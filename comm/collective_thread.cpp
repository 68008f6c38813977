#include "comm/collective_thread.hpp"

namespace axonn {

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
  changed_.wait(lock, [&] { return done_ >= ticket; });
  if (error_) std::rethrow_exception(error_);
}

void CollectiveThread::loop() {
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
