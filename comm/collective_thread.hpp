#pragma once
// One thread that runs a communicator's started collectives (Communicator::start_*) in the
// order they were submitted, so a blocking backend (Gloo) overlaps them with the caller's
// compute. Tickets count submissions from 1; wait(t) returns once tasks 1..t are done.
//
// Errors: the first task that throws stops the queue. Its exception is rethrown by that
// wait and by every later one; the tasks behind it are dropped without running (a group
// whose collective failed cannot run the next one in step with its peers).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace axonn {

class CollectiveThread {
 public:
  CollectiveThread();
  // Runs the tasks still queued (each collective has its own timeout), then joins.
  ~CollectiveThread();
  CollectiveThread(const CollectiveThread&) = delete;
  CollectiveThread& operator=(const CollectiveThread&) = delete;

  uint64_t submit(std::function<void()> task);
  void wait(uint64_t ticket);
  void wait_all() { wait(submitted_); }  // called by the submitting thread only
  // The time wait() spent blocked so far: the part of the started collectives that the
  // caller's work did not hide (the communication profile's hidden fraction).
  std::chrono::nanoseconds waited() const;
  // Whether the calling thread is some CollectiveThread's (its collectives were started).
  static bool on_collective_thread();

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  uint64_t submitted_ = 0;  // only the submitting thread writes it
  uint64_t done_ = 0;       // tasks finished, run or dropped
  std::chrono::nanoseconds waited_{0};
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace axonn
