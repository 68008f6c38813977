#include "core/trace_recorder.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/json_text.hpp"

namespace axonn {
namespace {

int64_t steady_to_unix_offset_ns() {
  const auto steady = std::chrono::steady_clock::now().time_since_epoch();
  const auto unix = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(unix).count() -
         std::chrono::duration_cast<std::chrono::nanoseconds>(steady).count();
}

int64_t ns_of(TraceRecorder::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

TraceRecorder::TraceRecorder(int rank, std::string process_label)
    : rank_(rank), process_label_(std::move(process_label)), steady_to_unix_ns_(steady_to_unix_offset_ns()) {
  track_names_.emplace_back("process");  // track 0: the process's own (instant) events
  track_named_.push_back(true);
}

int TraceRecorder::track_named(const std::string& name) {
  const auto [it, added] = named_tracks_.emplace(name, static_cast<int>(track_names_.size()));
  if (added) {
    track_names_.push_back(name);
    track_named_.push_back(true);
  }
  return it->second;
}

int TraceRecorder::track_of_this_thread() {
  const auto [it, added] = thread_tracks_.emplace(std::this_thread::get_id(), static_cast<int>(track_names_.size()));
  if (added) {
    track_names_.push_back("thread " + std::to_string(it->second));
    track_named_.push_back(false);
  }
  return it->second;
}

void TraceRecorder::name_this_thread(const std::string& name) {
  const std::lock_guard lock(mutex_);
  const auto track = static_cast<size_t>(track_of_this_thread());
  track_names_[track] = name;
  track_named_[track] = true;
}

void TraceRecorder::name_this_thread_once(const std::string& name) {
  const std::lock_guard lock(mutex_);
  const auto track = static_cast<size_t>(track_of_this_thread());
  if (track_named_[track]) return;
  track_names_[track] = name;
  track_named_[track] = true;
}

void TraceRecorder::span(const char* category, std::string name, Clock::time_point start, Clock::time_point end,
                         Args args, const std::string& track, bool recent) {
  const bool traced = active();
  if (!traced && !recent) return;
  const std::lock_guard lock(mutex_);
  Event e{std::move(name),
          category,
          track.empty() ? track_of_this_thread() : track_named(track),
          ns_of(start),
          ns_of(end) - ns_of(start),
          std::move(args)};
  if (recent) {
    recent_.push_back(e);
    if (recent_.size() > kRecentEvents) recent_.pop_front();
  }
  if (traced) traced_.push_back(std::move(e));
}

size_t TraceRecorder::traced_events() const {
  const std::lock_guard lock(mutex_);
  return traced_.size();
}

int64_t TraceRecorder::unix_us(int64_t steady_ns) const { return (steady_ns + steady_to_unix_ns_) / 1000; }

bool TraceRecorder::write(const std::filesystem::path& path, std::string* why) const {
  std::vector<Event> events;
  {
    const std::lock_guard lock(mutex_);
    events = traced_;
  }
  return write_events(path, events, "", why);
}

bool TraceRecorder::write_recent(const std::filesystem::path& path, const std::string& note, std::string* why) const {
  std::vector<Event> events;
  {
    const std::lock_guard lock(mutex_);
    events.assign(recent_.begin(), recent_.end());
  }
  return write_events(path, events, note, why);
}

// {"displayTimeUnit": "ms", "traceEvents": [metadata..., events..., note]}: pid is the rank,
// tid the track; ts and dur in microseconds (fractions kept to the nanosecond).
bool TraceRecorder::write_events(const std::filesystem::path& path, const std::vector<Event>& events,
                                 const std::string& note, std::string* why) const {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path part = path.string() + ".part";
  std::FILE* f = std::fopen(part.c_str(), "w");
  if (f == nullptr) {
    *why = "cannot write " + part.string() + ": " + std::strerror(errno);
    return false;
  }
  std::vector<std::string> names;
  {
    const std::lock_guard lock(mutex_);
    names = track_names_;
  }
  std::fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  std::fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": %s}},\n",
               rank_, json_string(process_label_).c_str());
  std::fprintf(f,
               "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"sort_index\": "
               "%d}}",
               rank_, rank_);
  for (size_t t = 0; t < names.size(); ++t)
    std::fprintf(f,
                 ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %zu, \"args\": {\"name\": %s}}",
                 rank_, t, json_string(names[t]).c_str());
  int64_t last_ns = 0;
  for (const Event& e : events) {
    std::fprintf(f,
                 ",\n{\"name\": %s, \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %" PRId64
                 ".%03d, \"dur\": %.3f, "
                 "\"pid\": %d, \"tid\": %d",
                 json_string(e.name).c_str(), e.category, unix_us(e.start_ns),
                 static_cast<int>((e.start_ns + steady_to_unix_ns_) % 1000), static_cast<double>(e.duration_ns) / 1e3,
                 rank_, e.track);
    if (!e.args.empty()) {
      std::fprintf(f, ", \"args\": {");
      for (size_t i = 0; i < e.args.size(); ++i)
        std::fprintf(f, "%s%s: %s", i > 0 ? ", " : "", json_string(e.args[i].first).c_str(), e.args[i].second.c_str());
      std::fprintf(f, "}");
    }
    std::fprintf(f, "}");
    last_ns = std::max(last_ns, e.start_ns + e.duration_ns);
  }
  if (!note.empty()) {
    const int64_t now_ns = ns_of(Clock::now());
    std::fprintf(f,
                 ",\n{\"name\": \"written here\", \"cat\": \"note\", \"ph\": \"i\", \"s\": \"p\", \"ts\": %" PRId64
                 ", \"pid\": %d, \"tid\": 0, \"args\": {\"why\": %s}}",
                 unix_us(std::max(now_ns, last_ns)), rank_, json_string(note).c_str());
  }
  std::fprintf(f, "\n]}\n");
  const bool written = std::fflush(f) == 0 && std::ferror(f) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    *why = "cannot write " + part.string() + ": " + std::strerror(errno);
    return false;
  }
  std::filesystem::rename(part, path, ec);
  if (ec) {
    *why = "cannot rename " + part.string() + " to " + path.string() + ": " + ec.message();
    return false;
  }
  return true;
}

}  // namespace axonn
