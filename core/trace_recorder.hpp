#pragma once
// One rank's timeline as Chrome trace events (the JSON that Perfetto and chrome://tracing
// open): complete events ("ph": "X") with a name, a category, a start and a duration, on a
// track per thread or per named stream, with their arguments.
//
// Two buffers:
//   - the traced steps' events, kept while tracing is active (set_active, the steps of
//     run.trace_steps) and written by write(): <run.dir>/trace/rank-00003.json;
//   - the last kRecentEvents events whatever the steps, kept always, for the file written when
//     a collective hangs (write_recent): trace/hang-rank-3.json. Only cheap, per-step-rare
//     events go there while tracing is off (collectives, step phases): the per-op spans of the
//     backend are recorded only while active, so tracing off costs one atomic load per op.
//
// Times: steady_clock points, written as microseconds since the Unix epoch (the steady clock's
// offset to the system clock is taken once, at construction), so the files of ranks on hosts
// whose clocks agree (NTP) line up when merged (scripts/merge_traces.py).
//
// Thread-safe: the compute thread, the collective threads and the checkpoint writer record
// into one recorder.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace axonn {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kRecentEvents = 100;

  // An event's arguments, "key": value pairs written as given: a value is raw JSON (a number,
  // or a string already quoted: json_string, core/json_text.hpp).
  using Args = std::vector<std::pair<std::string, std::string>>;

  // process_label: the rank's name in a viewer, e.g. "rank 3 (node07)".
  TraceRecorder(int rank, std::string process_label);

  int rank() const { return rank_; }
  bool active() const { return active_.load(std::memory_order_relaxed); }
  void set_active(bool on) { active_.store(on, std::memory_order_relaxed); }

  // Names the calling thread's track ("compute", "collectives x"); a thread that never names
  // itself is "thread N".
  void name_this_thread(const std::string& name);
  void name_this_thread_once(const std::string& name);  // unless it has a name already

  // A complete event on the calling thread's track, or on `track` (a stream's name) when not
  // empty. Kept in the traced events while active, and in the recent ones when `recent` (the
  // backend's ops pass false: they are recorded only while active).
  void span(const char* category, std::string name, Clock::time_point start, Clock::time_point end, Args args = {},
            const std::string& track = "", bool recent = true);

  // Writes the traced events (and the tracks' names) to `path`, creating its folder; returns
  // false and says why in *why when it cannot.
  bool write(const std::filesystem::path& path, std::string* why) const;
  // The same for the recent events, with `note` (why they were written: the error) as an
  // instant event at the end.
  bool write_recent(const std::filesystem::path& path, const std::string& note, std::string* why) const;
  size_t traced_events() const;

 private:
  struct Event {
    std::string name;
    const char* category;
    int track;
    int64_t start_ns, duration_ns;  // start: since the steady clock's epoch
    Args args;
  };
  int track_of_this_thread();                // mutex_ held
  int track_named(const std::string& name);  // mutex_ held
  bool write_events(const std::filesystem::path& path, const std::vector<Event>& events, const std::string& note,
                    std::string* why) const;
  int64_t unix_us(int64_t steady_ns) const;

  const int rank_;
  const std::string process_label_;
  const int64_t steady_to_unix_ns_;  // unix time = steady time + this
  std::atomic<bool> active_{false};
  mutable std::mutex mutex_;
  std::vector<Event> traced_;
  std::deque<Event> recent_;
  std::map<std::thread::id, int> thread_tracks_;
  std::map<std::string, int> named_tracks_;
  std::vector<std::string> track_names_;  // by track id
  std::vector<bool> track_named_;         // by track id: named by name_this_thread*
};

}  // namespace axonn
