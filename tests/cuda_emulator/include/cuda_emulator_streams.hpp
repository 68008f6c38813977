#pragma once
// Streams and events of the CUDA emulator. Kernels, copies and memsets on an ordinary stream
// (the trainer's compute stream) run at once, in the calling thread, so such a stream is
// always idle. Streams made with cudaStreamCreateWithPriority (the NCCL communicators' own)
// are queues: event records, waits on events, copies and NCCL collectives wait there until
// the items before them are done, and a collective runs when every member rank's queue has
// reached it (ranks are threads of the test process). So a started collective really is
// outstanding until its peers arrive, an event recorded after it completes only then, and
// a host or compute-stream wait on that event blocks until it does.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>

namespace cuda_emulator {

struct Event {
  uint64_t recorded = 0;   // records issued
  uint64_t completed = 0;  // the newest record reached in its stream
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

// A queued item: `ready` says whether it can complete now (it may act, e.g. copy or run a
// collective), called only when it is at the head of its stream.
struct QueueItem {
  std::function<bool()> ready;
};

}  // namespace cuda_emulator

struct CUstream_st {
  bool queued = false;
  std::deque<cuda_emulator::QueueItem> items;
};
struct CUevent_st {
  std::shared_ptr<cuda_emulator::Event> event = std::make_shared<cuda_emulator::Event>();
};

namespace cuda_emulator {

// Every queued stream of the process, under one lock, with a condition to wait for progress.
struct Queues {
  std::mutex mutex;
  std::condition_variable progressed;
  std::set<CUstream_st*> streams;
};
inline Queues& queues() {
  static Queues q;
  return q;
}

// Completes every item that can complete, across all streams, until none can (lock held).
inline void progress_locked() {
  bool changed = true;
  while (changed) {
    changed = false;
    for (CUstream_st* s : queues().streams)
      while (!s->items.empty() && s->items.front().ready()) {
        s->items.pop_front();
        changed = true;
      }
  }
  queues().progressed.notify_all();
}

// Blocks the calling thread until `done` holds (lock held), making progress meanwhile; a
// wait of a minute is a deadlock of the emulated program.
template <typename Done>
void wait_until(std::unique_lock<std::mutex>& lock, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    progress_locked();
    if (done()) return;
    if (std::chrono::steady_clock::now() > deadline) die("a stream or event wait did not complete within 60 s");
    queues().progressed.wait_for(lock, std::chrono::milliseconds(1));
  }
}

inline void enqueue(CUstream_st* s, std::function<bool()> ready) {
  std::unique_lock lock(queues().mutex);
  s->items.push_back({std::move(ready)});
  progress_locked();
}

inline bool is_queued(const CUstream_st* s) { return s != nullptr && s->queued; }

}  // namespace cuda_emulator
