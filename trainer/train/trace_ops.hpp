#pragma once
// The trainer's side of a rank's timeline (core/trace_recorder.hpp): the backend's ops while
// the recorder is active (the steps of run.trace_steps), and spans of the step's phases.
#include <string>
#include <utility>

#include "core/trace_recorder.hpp"
#include "trainer/observed_backend.hpp"

namespace axonn {

// Each op of an ObservedBackend as an event (category "op") on the calling thread's track,
// while `trace` is active; GEMMs carry their FLOPs.
class TraceOps final : public OpObserver {
 public:
  explicit TraceOps(TraceRecorder& trace) : trace_(trace) {}
  bool observing() const override { return trace_.active(); }
  void op(const std::string& name, double flops, Clock::time_point start, Clock::time_point end) override {
    TraceRecorder::Args args;
    if (flops > 0) args.emplace_back("flops", std::to_string(static_cast<long long>(flops)));
    trace_.span("op", name, start, end, std::move(args), "", /*recent=*/false);
  }

 private:
  TraceRecorder& trace_;
};

// A span from construction to destruction on the calling thread's track: a phase of the step
// ("data", "forward_backward", "optimizer"). Nothing when `trace` is null.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* trace, const char* category, std::string name, TraceRecorder::Args args = {})
      : trace_(trace),
        category_(category),
        name_(std::move(name)),
        args_(std::move(args)),
        start_(TraceRecorder::Clock::now()) {}
  ~TraceSpan() {
    if (trace_ != nullptr)
      trace_->span(category_, std::move(name_), start_, TraceRecorder::Clock::now(), std::move(args_));
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  TraceRecorder* trace_;
  const char* category_;
  std::string name_;
  TraceRecorder::Args args_;
  TraceRecorder::Clock::time_point start_;
};

}  // namespace axonn
